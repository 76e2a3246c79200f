"""`python -m stages.demo_corpus`: the `demo_corpus` stage, exactly as dvc.yaml runs it."""
from stages.demo_corpus.stage import main

if __name__ == "__main__":
    main()
