"""Growth: the fitted exponent of cost versus size (~1 linear, ~2 quadratic) for H3, H4 and H6.

"H3+H6" is one default-mode chat request through the serving layer at 2K/8K/32K output tokens
(``benchmarks.h3_growth``): the issue's "O(n) per request" goal for the optimized forms.
"""

from benchmarks.bench_stream_deltas import NUM_TOKENS as H6_SIZES
from benchmarks.bench_stream_deltas import h6_stream
from benchmarks.bench_stream_outputs import NUM_TOKENS as H3_SIZES
from benchmarks.bench_stream_outputs import h3_stream
from benchmarks.bench_token_storage import PROMPT_LENS as H4_SIZES
from benchmarks.common import FORMS, growth_exponent, history_safe
from benchmarks.h3_growth import SIZES as H3H6_SIZES
from benchmarks.h3_growth import h3h6_chat
from benchmarks.workloads import TokenLifecycle, form_args


def growth_builders(hot_path: str, form: str):
    """(build(size) -> timed callable, sizes) of one hot path's family."""
    if hot_path == "H3":
        return (lambda n: h3_stream(form, n).run), H3_SIZES
    if hot_path == "H3+H6":
        return (lambda n: h3h6_chat(form, n).run), H3H6_SIZES
    if hot_path == "H4":
        return (lambda n: TokenLifecycle(form_args("H4", form), n, "lifecycle").run), H4_SIZES
    return (lambda n: h6_stream(form, "chat", n).run), H6_SIZES


class TrackGrowth:
    """Exponent of the whole-request (H3, H6 chat) or whole-lifecycle (H4) cost over the sizes."""

    params = (["H3", "H3+H6", "H4", "H6"], list(FORMS))
    param_names = ["hot_path", "form"]
    unit = "exponent"
    timeout = 600

    def setup(self, hot_path, form):
        with history_safe():
            self.build, self.sizes = growth_builders(hot_path, form)
            self.build(self.sizes[0])

    def track_exponent(self, hot_path, form):
        return growth_exponent(self.build, self.sizes)
