"""The local model of PreTPost (Ebadi & Sands, thesis Papers IV-V) and optimal d_X-local randomisers.

A user runs ``post ∘ T ∘ pre`` on their own data after pricing the right-stochastic matrix ``T``
(:func:`cost`) against their personal budget; analyst code runs in an OS sandbox. The optimal
d_X-locally-private ``T`` for a metric on the user's domain is a linear program
(:func:`optimal_randomiser`). See docs/local.md and the README's local-model section.
"""

from dprivacy.local.cost import (
    DXCheck,
    check_dx,
    cost,
    dx_cost,
    pair_loss,
    product_cost,
    require_non_expansive,
    sequential_cost,
    validate_stochastic,
)
from dprivacy.local.device.agent import UserAgent
from dprivacy.local.device.budget import PersonalBudget
from dprivacy.local.device.policy import PublicPolicy
from dprivacy.local.device.sandbox import Outcome, Sandbox, SandboxUnavailableError
from dprivacy.local.dx_randomiser import OptimalRandomiser, optimal_randomiser
from dprivacy.local.estimation import FrequencyEstimate, NotIdentifiableError, estimate_frequencies
from dprivacy.local.query import Code, Query
from dprivacy.local.randomiser import MatrixRandomiser, ProductRandomiser, Randomiser, randomiser_from_json

__all__ = [
    "Code", "DXCheck", "FrequencyEstimate", "MatrixRandomiser", "NotIdentifiableError",
    "OptimalRandomiser", "Outcome", "PersonalBudget", "ProductRandomiser", "PublicPolicy", "Query",
    "Randomiser", "Sandbox", "SandboxUnavailableError", "UserAgent", "check_dx", "cost", "dx_cost",
    "estimate_frequencies", "optimal_randomiser", "pair_loss", "product_cost",
    "randomiser_from_json", "require_non_expansive", "sequential_cost", "validate_stochastic",
]
