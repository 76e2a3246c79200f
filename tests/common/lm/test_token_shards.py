import numpy as np
import pytest
import torch

from stages.common.lm.token_shards import (
    HEADER_BYTES,
    TIERS,
    TierMix,
    TierNeed,
    TierRatios,
    TierSampler,
    TokenShard,
    TokenShardWriter,
    WindowSampler,
    check_tier_tokens,
    is_validation,
    open_tiers,
    shard_paths,
    tier_tokens,
    token_dtype,
    window_tokens,
)
from stages.common.runtime.params import ConfigError

EOS = 0


def write_shard(base, docs, vocab_size=1000):
    writer = TokenShardWriter(base, vocab_size, EOS)
    for doc in docs:
        writer.add(np.asarray(doc))
    writer.close()
    return TokenShard(base)


def test_round_trip_docs_header_and_index(tmp_path):
    docs = [[5, 6, 7], [8], list(range(10, 30))]
    shard = write_shard(tmp_path / "easy", docs)
    assert shard.num_docs == 3 and shard.num_tokens == 3 + 1 + 1 + 1 + 20 + 1 and len(shard) == shard.num_tokens
    assert shard.dtype == np.uint16 and shard.vocab_size == 1000 and shard.eos_id == EOS
    for i, doc in enumerate(docs):
        assert shard.doc(i).tolist() == doc + [EOS]
    assert isinstance(shard.tokens, np.memmap)  # mapped, not read
    bin_path, idx_path = shard_paths(tmp_path / "easy")
    assert bin_path.stat().st_size == HEADER_BYTES + 2 * shard.num_tokens
    assert np.load(idx_path).tolist() == [0, 4, 6, 27]


@pytest.mark.parametrize("num_docs", [0, 1, 7, 20])
def test_offsets_spill_to_disk_and_index_is_np_save_bytes(tmp_path, monkeypatch, num_docs):
    """The writer keeps at most OFFSETS_BUFFER offsets in memory (here 3: several spills); the index it writes
    is byte for byte np.save's of the whole array, and the side file is gone."""
    monkeypatch.setattr(TokenShardWriter, "OFFSETS_BUFFER", 3)
    rng = np.random.default_rng(num_docs)
    docs = [rng.integers(1, 1000, rng.integers(0, 6)).tolist() for _ in range(num_docs)]
    shard = write_shard(tmp_path / "s", docs)
    offsets = np.cumsum([0] + [len(d) + 1 for d in docs]).astype(np.int64)
    np.save(tmp_path / "expected.npy", offsets)
    _, idx_path = shard_paths(tmp_path / "s")
    assert idx_path.read_bytes() == (tmp_path / "expected.npy").read_bytes()
    assert shard.num_docs == num_docs and sorted(p.name for p in tmp_path.iterdir()) == ["expected.npy", "s.bin",
                                                                                          "s.idx.npy"]


def test_uint32_when_the_vocabulary_does_not_fit_uint16(tmp_path):
    assert token_dtype(65536) == np.uint16 and token_dtype(65537) == np.uint32
    shard = write_shard(tmp_path / "big", [[70_000, 1], [65_535]], vocab_size=100_000)
    assert shard.dtype == np.uint32 and shard.doc(0).tolist() == [70_000, 1, EOS]


def test_windows_are_shifted_slices(tmp_path):
    shard = write_shard(tmp_path / "s", [list(range(1, 50))])
    windows = shard.windows(np.array([0, 10]), seq_len=8)
    assert windows.dtype == torch.int64 and windows.shape == (2, 9)
    assert windows[1].tolist() == list(range(11, 20))
    assert shard.num_windows(8) == 50 - 8
    sequential = list(shard.sequential_windows(seq_len=8, batch_size=2))
    assert sum(len(b) for b in sequential) == len(range(0, 42, 8)) and sequential[0][1, 0].item() == 9


def test_empty_shard_is_valid(tmp_path):
    shard = write_shard(tmp_path / "empty", [])
    assert shard.num_tokens == 0 and shard.num_docs == 0 and shard.num_windows(4) == 0
    assert list(shard.sequential_windows(4, 2)) == []


def test_corrupt_shard_is_rejected(tmp_path):
    write_shard(tmp_path / "s", [[1, 2, 3]])
    bin_path, _ = shard_paths(tmp_path / "s")
    data = bytearray(bin_path.read_bytes())
    bin_path.write_bytes(bytes(data[:-2]))
    with pytest.raises(ValueError, match="header says"):
        TokenShard(tmp_path / "s")
    bin_path.write_bytes(b"NOTTOKEN" + bytes(data[8:]))
    with pytest.raises(ValueError, match="bad magic"):
        TokenShard(tmp_path / "s")


def test_validation_split_is_deterministic_and_near_the_fraction():
    ids = [f"doc-{i}" for i in range(20_000)]
    picked = [is_validation(i, seed=0, val_fraction=0.1) for i in ids]
    assert picked == [is_validation(i, seed=0, val_fraction=0.1) for i in ids]
    assert 0.09 < np.mean(picked) < 0.11
    assert picked != [is_validation(i, seed=1, val_fraction=0.1) for i in ids]


def test_schedule_moves_from_start_to_end():
    mix = TierMix(TierRatios(6, 3, 1), TierRatios(1, 1, 2), "linear")
    np.testing.assert_allclose(mix.ratios(0.0), [0.6, 0.3, 0.1])
    np.testing.assert_allclose(mix.ratios(1.0), [0.25, 0.25, 0.5])
    np.testing.assert_allclose(mix.ratios(0.5), [0.425, 0.275, 0.3])
    cosine = TierMix(TierRatios(1, 0, 0), TierRatios(0, 0, 1), "cosine")
    assert cosine.ratios(0.1)[2] < 0.1 < 0.5 == pytest.approx(cosine.ratios(0.5)[2])
    np.testing.assert_allclose(TierMix(schedule="constant").ratios(0.9), TierMix().ratios(0.0))
    with pytest.raises(ValueError, match="schedule"):
        TierMix(schedule="sigmoid")
    with pytest.raises(ValueError, match="tier ratios"):
        TierRatios(-1, 1, 1)


@pytest.fixture
def tiers(tmp_path):
    rng = np.random.default_rng(0)
    # Each tier's tokens live in their own id range, so a window tells which tier it came from.
    for t, tier in enumerate(TIERS):
        docs = [rng.integers(100 * (t + 1), 100 * (t + 2), size=300) for _ in range(20)]
        write_shard(tmp_path / "train" / tier, docs)
    return open_tiers(tmp_path, "train")


def test_sampler_ratios_over_many_draws_match_the_schedule(tiers):
    mix = TierMix(TierRatios(0.7, 0.2, 0.1), TierRatios(0.1, 0.3, 0.6), "linear")
    sampler = TierSampler(tiers, mix, seq_len=16, batch_size=64, total_steps=101, seed=0)
    for step in (0, 50, 100):
        counts = np.zeros(3)
        for repeat in range(40):  # 2560 draws at (almost) the same point of the schedule
            batch = TierSampler(tiers, mix, 16, 64, total_steps=101, seed=repeat).batch(step)
            counts += np.bincount(batch.tiers, minlength=3)
            # rows really come from the tier they are labelled with
            assert ((batch.inputs // 100 - 1).max(dim=1).values.numpy() == batch.tiers).all()
        np.testing.assert_allclose(counts / counts.sum(), mix.ratios(step / 100), atol=0.03)
    np.testing.assert_allclose(sampler.batch(50).ratios, mix.ratios(0.5))


def test_uniform_schedule_draws_each_tier_by_its_share_of_the_windows(tmp_path):
    rng = np.random.default_rng(0)
    for t, (tier, num_docs) in enumerate(zip(TIERS, (30, 10, 5))):  # unequal tiers: 6:2:1 tokens
        write_shard(tmp_path / "train" / tier, [rng.integers(100 * (t + 1), 100 * (t + 2), size=299)
                                                for _ in range(num_docs)])
    shards = open_tiers(tmp_path, "train")
    mix = TierMix(TierRatios(0, 0, 1), TierRatios(0, 0, 1), "uniform")  # start and end are unused
    windows = np.array([shards[t].num_windows(16) for t in TIERS], dtype=np.float64)
    expected = windows / windows.sum()
    counts = np.zeros(3)
    for seed in range(40):
        sampler = TierSampler(shards, mix, seq_len=16, batch_size=64, total_steps=10, seed=seed)
        for step in (0, 9):  # the same at every step
            batch = sampler.batch(step)
            np.testing.assert_allclose(batch.ratios, expected)
            counts += np.bincount(batch.tiers, minlength=3)
    np.testing.assert_allclose(counts / counts.sum(), expected, atol=0.03)
    assert expected[0] > 0.6 and expected[2] < 0.15  # not the even 1/3 each
    with pytest.raises(ValueError, match="sizes"):
        mix.ratios(0.5)
    with pytest.raises(ValueError, match="uniform"):  # the allowed schedules are named
        TierMix(schedule="random")


def test_sampler_is_a_function_of_seed_and_step(tiers):
    def make(seed=0):
        return TierSampler(tiers, TierMix(), seq_len=16, batch_size=8, total_steps=10, seed=seed)

    a, b = make().batch(3), make().batch(3)
    assert torch.equal(a.inputs, b.inputs) and torch.equal(a.targets, b.targets)
    assert torch.equal(a.inputs[:, 1:], a.targets[:, :-1])  # targets are inputs shifted by one
    assert not torch.equal(a.inputs, make().batch(4).inputs)  # resuming at step k needs only k
    assert not torch.equal(a.inputs, make(seed=1).batch(3).inputs)


def test_ranks_reading_slices_see_exactly_the_global_batch(tiers):
    sampler = TierSampler(tiers, TierMix(), seq_len=16, batch_size=8, total_steps=10, seed=0)
    whole = sampler.batch(5)
    parts = [sampler.batch(5, slice(lo, lo + 2)) for lo in range(0, 8, 2)]  # 4 ranks x 2 rows
    assert torch.equal(torch.cat([p.inputs for p in parts]), whole.inputs)
    assert np.array_equal(np.concatenate([p.tiers for p in parts]), whole.tiers)


def test_window_sampler_draws_uniform_windows_of_one_shard_by_seed_and_step(tmp_path):
    shard = write_shard(tmp_path / "ref", [np.arange(1, 200), np.arange(300, 400)])
    sampler = WindowSampler(shard, seq_len=16, batch_size=8, seed=3)
    batch = sampler.batch(7)
    # the generator seeded with (seed, step): one uniform start per row over the shard's windows
    starts = np.random.default_rng([3, 7]).integers(0, shard.num_windows(16), size=8)
    window = shard.windows(starts, 16)
    assert torch.equal(batch.inputs, window[:, :-1]) and torch.equal(batch.targets, window[:, 1:])
    assert batch.tiers.size == 0 and batch.ratios.size == 0
    assert not torch.equal(batch.inputs, sampler.batch(8).inputs)
    assert not torch.equal(batch.inputs, WindowSampler(shard, 16, 8, seed=4).batch(7).inputs)
    parts = [sampler.batch(7, slice(lo, lo + 4)) for lo in (0, 4)]  # 2 ranks x 4 rows
    assert torch.equal(torch.cat([p.inputs for p in parts]), batch.inputs)
    with pytest.raises(ValueError, match="fewer than one 401-token window"):
        WindowSampler(shard, seq_len=400, batch_size=8, seed=0)


def test_sampler_skips_a_tier_too_small_for_a_window(tmp_path):
    for tier, n in zip(TIERS, (200, 5, 200)):
        write_shard(tmp_path / "val" / tier, [np.arange(1, n)])
    sampler = TierSampler(open_tiers(tmp_path, "val"), TierMix(), seq_len=16, batch_size=32, total_steps=10, seed=0)
    batch = sampler.batch(0)
    assert 1 not in batch.tiers.tolist() and batch.ratios[1] == 0 and batch.ratios.sum() == pytest.approx(1)
    with pytest.raises(ValueError, match="no tier"):
        TierSampler(open_tiers(tmp_path, "val"), TierMix(), seq_len=500, batch_size=4, total_steps=10, seed=0)


def test_tier_sizes_come_from_the_headers_and_a_short_tier_is_one_line(tmp_path):
    """What train, prune and qat check before torchrun starts: tokens per tier from 64 bytes of each shard (and
    its file size), every short tier named with what it holds and what it needs."""
    for split, length in (("train", 40), ("val", 9)):
        for t, tier in enumerate(TIERS):
            write_shard(tmp_path / split / tier, [[7] * length] * (t + 1))  # tiers of 1, 2 and 3 documents
    assert tier_tokens(tmp_path, "val") == {"easy": 10, "medium": 20, "hard": 30}
    assert window_tokens(16) == 17 and window_tokens(16, num_windows=2) == 33  # what sequential_windows reads
    assert TokenShard(tmp_path / "val" / "medium").num_windows(16) == 4  # one full window: 17 of its 20 tokens
    needs = [TierNeed("train", window_tokens(16, 2), "one micro batch", "lower the batch"),
             TierNeed("val", window_tokens(16), "validation", "raise 'perplexity.val_fraction'")]
    check_tier_tokens(tmp_path, needs[:1])
    with pytest.raises(ConfigError) as e:
        check_tier_tokens(tmp_path, needs)
    assert str(e.value) == (f"{tmp_path}: too few tokens: the val tiers hold easy 10, medium 20, hard 30 tokens, 17 "
                            "needed in each for validation: raise 'perplexity.val_fraction'")
    bin_path, _ = shard_paths(tmp_path / "val" / "hard")
    bin_path.write_bytes(bin_path.read_bytes()[:-2])  # cut short: the header no longer matches the file
    with pytest.raises(ValueError, match="hard.bin: 122 bytes, header says 124"):
        tier_tokens(tmp_path, "val")
    bin_path.unlink()
    with pytest.raises(ValueError, match="hard.bin: no such token shard; the perplexity stage writes it: rerun it"):
        tier_tokens(tmp_path, "val")
