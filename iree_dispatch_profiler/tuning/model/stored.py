"""The model's answer kept in the results store: written when a tuning ends with an answer that
applies and agrees, and on the next tuning of the same model (its text after IREE's input
phase and its function) on the same target and IREE version, asked the same way, re-confirmed
in one session (flags and spec compiled, the spec checked, outputs verified, the model timed
against IREE's default) instead of searched. An answer that no longer holds is said, and the
model is tuned as without it."""
from __future__ import annotations

import hashlib
import json
import time

from iree_dispatch_profiler.core import stats
from iree_dispatch_profiler.core.values import shown_patterns
from iree_dispatch_profiler.store import results
from iree_dispatch_profiler.tuning import spec as tuning_spec
from iree_dispatch_profiler.tuning.flags import FlagSet
from iree_dispatch_profiler.tuning.model import final, flag_search
from iree_dispatch_profiler.tuning.model.final import ModelResult
from iree_dispatch_profiler.tuning.model.tuner import ModelTuner

SCOPE = "model"


def question(tuner: ModelTuner) -> dict:
    """What a stored model answer must share: the model, the target, IREE, and how the search
    was asked (--base-flags, --flags, --top, --dispatches)."""
    s = tuner.s
    model = hashlib.sha256(tuner.lowered.read_bytes() + tuner.function.encode()).hexdigest()
    return {"signature": model[:32],
            "target": results.target_fields(tuner.target.resolved_cpu())["target"],
            "iree_version": tuner.tools.version(),
            "flags": json.dumps({"base_flags": s.base_flags, "flags": s.flag_points,
                                 "top": s.top, **({"rewrite": tuner.rewrite} if tuner.rewrite
                                                  else {}),
                                 **({"dispatches": shown_patterns(s.dispatches)}
                                    if s.dispatches else {})}, sort_keys=True)}


def remember(tuner: ModelTuner, result: ModelResult, targets: set[int], complete: bool) -> None:
    """The answer of a finished tuning, when it applies as intended and agrees (IREE's default
    too: no flags or spec beat it; but not in place of an answer the final session found
    slower, final.default_answer: sessions that disagree are searched again)."""
    if result.problems or not result.outputs_ok or result.dropped is not None:
        return
    spec = result.spec.read_text() if result.spec is not None else None
    flags = result.flags
    answer = {"flags": [flags.name, flags.flags, flags.why] if flags else None, "spec": spec,
              "targets": sorted(targets),
              "seconds": round(time.perf_counter() - tuner.started, 1)}  # the whole tuning
    tuner.remember(SCOPE, question(tuner), answer, tuner.s.n_trial if complete else 0,
                   result.speedup)


def reuse(tuner: ModelTuner, default_roots: dict,
          ) -> tuple[ModelResult, set[int], list[dict]] | None:
    """The stored answer re-confirmed: (the result, its targets, the dispatches as the final
    session ranks them); None when there is none or it no longer holds."""
    s, log = tuner.s, tuner.log
    if tuner.store is None:
        return None
    try:
        found = tuner.store.answer(SCOPE, **question(tuner))
    except Exception as error:
        tuner.store_failed(error)
        return None
    if found is None or (found["trials"] or 0) < s.n_trial:
        return None
    start = time.perf_counter()
    answer = found["answer"]
    flags = FlagSet(*answer["flags"]) if answer.get("flags") else None
    choice = flag_search.FlagChoice(flags)
    if flags is not None:
        choice.build, choice.roots = tuner.build_surveyed(tuner.flags_build(flags.name), flags.args)
        if choice.build.reason:
            log(f"The results store's answer no longer compiles ({flags.name}: "
                f"{choice.build.reason.splitlines()[0][:200]}): tuning")
            return None
    roots = flag_search.adopt(tuner, choice, default_roots)
    spec, entries = None, []
    if answer.get("spec"):
        spec = s.paths.tuning_spec
        spec.write_text(answer["spec"])
        entries = tuning_spec.read_entries(spec)
    result = final.measure_model(tuner, entries, spec, flags, roots, {}, s.confirm_seconds,
                                 settle=True)
    seconds = time.perf_counter() - start
    speedup = result.speedup
    # IREE's data tiling beating the answer (IREE's default itself, or flags and spec) where the
    # search has data tiling among its sets says a search would find better: an answer stored
    # before the search knew to try it (a dynamic batch's model kept IREE's default, 2.2x slower)
    tiling = result.over_data_tiling if result.answer else result.data_tiling
    searched = s.base_flags is None and s.flag_points is None  # data tiling among the sets
    slower = searched and tiling is not None and stats.significant(tiling, stats.MIN_EFFECT) and (
        (tiling.median < 1) == result.answer)  # the answer over it, or it over the default
    holds = not result.problems and result.outputs_ok and not slower and (not result.answer or (
        speedup is not None and speedup.median > 1
        and stats.significant(speedup, stats.MIN_EFFECT)))
    if not holds:
        why = ("its spec: " + "; ".join(result.problems) if result.problems else
               "its outputs disagree" if not result.outputs_ok else
               (f"it is {stats.direction(tiling)} than IREE's data tiling" if result.answer
                else f"IREE's data tiling is {stats.direction(tiling)} than IREE's default, the "
                     "answer") if slower else
               "it is no longer faster than IREE's default")
        log(f"The results store's answer for this model no longer holds ({why}, {seconds:.1f} s):"
            " tuning")
        flag_search.adopt(tuner, flag_search.FlagChoice(None), {})  # IREE's default again
        return None
    tuner.reused_seconds += seconds
    tuner.searched_seconds += float(answer.get("seconds", 0.0))
    shown = (f"flags {flags.name if flags else 'none'}, "
             f"{'a spec of ' + str(len(entries)) + ' entries' if spec else 'no spec'}")
    log(f"Answer from the results store ({shown}; tuned with {found['trials']} trials per target "
        f"in {float(answer.get('seconds', 0.0)):.0f} s on {found['recorded_at']} on "
        f"{found['machine']}), re-confirmed in {seconds:.1f} s: the flag search and the targets' "
        "search skipped")
    total = sum(result.default_ms.values()) or 1.0
    rows = [{"dispatch": d, "target": "", "share": ms / total,
             "root": roots[d].name if d in roots else "",
             "shape": roots[d].op.shape if d in roots and roots[d].op else ""}
            for d, ms in sorted(result.default_ms.items(), key=lambda x: -x[1])]
    return result, set(answer.get("targets", [])), rows
