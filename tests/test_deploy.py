"""The shipped launch recipes (deploy/) are well-formed and launch the train stage through torchrun."""
from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def test_slurm_script_parses_and_runs_the_stage_under_torchrun_with_c10d():
    script = ROOT / "deploy" / "slurm" / "train.sbatch"
    subprocess.run(["bash", "-n", str(script)], check=True)
    text = script.read_text()
    assert "--rdzv-backend=c10d" in text and "-m stages.train" in text and "#SBATCH --requeue" in text


def test_pytorchjob_manifest_is_an_elastic_job_running_the_stage():
    job, config = yaml.safe_load_all((ROOT / "deploy" / "k8s" / "pytorchjob.yaml").read_text())
    assert job["kind"] == "PyTorchJob" and config["kind"] == "ConfigMap"
    assert job["spec"]["elasticPolicy"]["rdzvBackend"] == "c10d"
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        command = replica["template"]["spec"]["containers"][0]["command"]
        assert command[:3] == ["python", "-m", "torch.distributed.run"] and "stages.train" in command
        assert replica["restartPolicy"] == "OnFailure"


def test_data_recipes_start_a_ray_cluster_and_run_dvc():
    script = ROOT / "deploy" / "slurm" / "data.sbatch"
    subprocess.run(["bash", "-n", str(script)], check=True)
    text = script.read_text()
    assert "ray start --head" in text and "ray start --block --address" in text and "dvc repro" in text
    (cluster,) = yaml.safe_load_all((ROOT / "deploy" / "k8s" / "raycluster.yaml").read_text())
    assert cluster["kind"] == "RayCluster" and cluster["spec"]["workerGroupSpecs"]
