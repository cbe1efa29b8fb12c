"""The fine-tuning chain as one job: a dataset and settings (``config``, the YAML of ``repro/chains.yaml``) run
stage by stage through the project's commands (``stages``) and reported as tables and a plot (``report``).
``python -m retromae_ir.chain --chain scifact-quick`` is the README's main job."""
