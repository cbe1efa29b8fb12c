"""Search: the exact hybrid searcher (DupMAE Eq. 12) and the brute-force scorer it is checked against."""
from retromae_ir.search.brute_force import BruteForceScorer
from retromae_ir.search.exact_hybrid import ExactHybridSearcher
from retromae_ir.search.index import HybridIndex, MODES

__all__ = ["BruteForceScorer", "ExactHybridSearcher", "HybridIndex", "MODES"]
