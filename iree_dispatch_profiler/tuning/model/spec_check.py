"""Does a tuning spec do what it is meant to, in the model: each entry attributed to the
dispatches its matcher accepts and checked against the configs IREE dumped."""
from __future__ import annotations

from iree_dispatch_profiler.core.library import TuningConfiguration
from iree_dispatch_profiler.tuning.spec import Entry

# IREE's name for a dispatch outlined from a module initializer (`_initializer_1_dispatch_0_...`):
# its work runs once, at load; const-expr hoisting puts one there when an op's operands are all
# constants (a GRU's first step, its hidden state zeros).
INITIALIZER_PREFIX = "_initializer_"


def check_spec(entries: list[Entry], default_roots: dict, tuned_roots: dict,
               library: bool = False) -> list[str]:
    """Problems: an entry whose matcher matches no dispatch, matches others than it is meant
    for, or matches one its config did not reach; a dispatch that changed config with no entry
    matching it. An entry is attributed to the dispatches whose root op its matcher accepts (so
    two entries may hand out the same config); one whose matcher we cannot read, to the
    dispatches that got its config. A `library` (a CPU's default spec, with entries for the ops
    of many models) may hold entries this model has no op for; not one matching is a problem.
    An initializer's dispatch an entry's matcher accepts is no problem either way: it is the
    same op as the entry's (the same name and operand types), run once at load, not per call."""
    from iree.compiler import ir

    problems, touched, unmatched = [], set(), 0
    with ir.Context() as context:
        for entry in entries:
            wanted = str(ir.Attribute.parse(entry.config.lowering_config, context))
            configured = {d for d, root in tuned_roots.items() if root.lowering_config == wanted}
            matched = configured if entry.matcher is None else {
                d for d, root in default_roots.items()
                if entry.matcher.accepts(root.name, root.operand_types)}
            intended = set(entry.intended)
            touched |= matched | intended
            matched = {d for d in matched if not d.startswith(INITIALIZER_PREFIX)}
            if not matched:
                unmatched += 1
                if not library:
                    problems.append(f"spec entry {entry.name} matches no dispatch")
            elif intended and matched - intended:
                problems.append(f"spec entry {entry.name} also configures "
                                f"{', '.join(sorted(matched - intended))}")
            elif (intended | matched) - configured:
                problems.append(f"spec entry {entry.name} misses "
                                f"{', '.join(sorted((intended | matched) - configured))}")
    changed = {d for d, root in tuned_roots.items()
               if d in default_roots and root.lowering_config != default_roots[d].lowering_config}
    for dispatch in sorted(changed - touched):
        problems.append(f"dispatch {dispatch} changed config without a spec entry for it")
    if library and entries and unmatched == len(entries):
        problems.append(f"none of the spec's {len(entries)} entries matches a dispatch")
    return problems


def iree_own(config: TuningConfiguration, dispatches: tuple[str, ...], default_roots: dict) -> bool:
    """Whether IREE already gives these dispatches this lowering config by itself."""
    from iree.compiler import ir

    with ir.Context() as context:
        wanted = str(ir.Attribute.parse(config.lowering_config, context))
    return all(default_roots[d].lowering_config == wanted for d in dispatches if d in default_roots)
