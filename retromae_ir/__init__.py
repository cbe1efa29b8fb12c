"""retromae-ir: RetroMAE, DupMAE and MASTER pre-training, encoding and hybrid retrieval inside Pyserini."""
from retromae_ir import pyserini_env as _pyserini_env

__version__ = "0.1.0"

# Any import of the toolkit makes a later `import pyserini` pick Java 21+ and survive being offline.
_pyserini_env.install_import_hook()
