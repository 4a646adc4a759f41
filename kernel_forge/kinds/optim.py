"""Optimizer steps: a multi-output elementwise update of every parameter, in place.

* Adam / AdamW (llm.c's adamw kernel, PyTorch's Adam and AdamW)::

      g' = gs * g (+ wd * p, decay "l2")
      m  = beta1 * m + (1 - beta1) * g'
      v  = beta2 * v + (1 - beta2) * g'^2
      p  = p - lr * ((m / c1) / (sqrt(v / c2) + eps) (+ wd * p, decay "decoupled": AdamW))

  the bias corrections ``c1``, ``c2`` given as parameters (llm.c), computed from an integer step
  ``t`` as ``1 - beta^t`` (correction "step"), or absent (1); ``eps`` a parameter or a constant
  read off the reference; ``gs`` a gradient scale (llm.c's ``grad_scale``), or absent (1).  With a
  fourth output, a master copy (llm.c's ``adamw_kernel3``: fp32 ``master_params`` beside bf16
  ``params``): ``p`` is the buffer whose old values the step reads, and the ``copy`` gets the
  new ``p`` too, in its own storage.
* SGD with momentum (PyTorch's SGD)::

      g'  = g (+ wd * p)
      buf = momentum * buf + (1 - dampening) * g'
      p   = p - lr * buf            (nesterov: p - lr * (g' + momentum * buf))

Which scalar parameter plays which part cannot be read off the manifest's values alone (llm.c's
probe has ``learning_rate == beta2_correction == 0.001``, and an ``eps`` of 1e-8 leaves no trace):
once the moment update holds on the probe, the reference is run again with every float scalar set
to a distinct telling value (:data:`TELL`), the roles are fitted there stage by stage (the first
moment gives beta1, the second beta2, the parameter the rest) and each binding is checked on the
probe's own values too.  Updates are compared as steps (new - old): a step of lr = 1e-3 is below
the closeness test's tolerance on the values themselves.
"""
from __future__ import annotations

import itertools
from typing import Iterator

import numpy as np

from kernel_forge.kinds.match import Match, param_for

#: the values every float scalar takes, in signature order, in the rerun that tells the roles apart
#: (distinct, in (0, 1), no two summing to 1)
TELL = (0.91, 0.83, 0.74, 0.67, 0.58, 0.46, 0.37, 0.29, 0.23, 0.19, 0.13, 0.07)
#: constant epsilons tried when no parameter carries it (read off a rerun of tiny moments)
EPSILONS = (1e-8, 1e-6, 1e-5, 1e-7, 1e-10, 1e-12, 1e-16, 0.0)
#: values the roles are fitted on (a binding found is then checked on every value): identification stays fast
SAMPLE = 4096
#: the unit roundoff of each storage type: a stored value is this close to what was computed
_UNIT = {"float64": 2.0 ** -53, "float32": 2.0 ** -24, "float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}


class _Data:
    """One run of the reference: the buffers before (``old``), after (``new``) and the scalars."""

    def __init__(self, old: dict, new: dict, scalars: dict, units: dict):
        self.old, self.new, self.scalars, self.units = old, new, scalars, units

    def holds(self, name: str, want: np.ndarray) -> bool:
        """Whether ``name``'s new values are ``want``: within 2e-3 of each value's step (want -
        old), plus a few units of rounding of the stored value and 1e-5 of the largest step."""
        got, old = self.new[name], self.old[name]
        if got.shape != want.shape or not np.all(np.isfinite(want)):
            return False
        step = np.abs(want - np.nan_to_num(old))          # a write-only output (a master's copy): its new values
        tol = 2e-3 * step + 8 * self.units[name] * np.abs(want) + 1e-5 * (float(step.max()) if step.size else 0.0)
        return bool(np.all(np.abs(got - want) <= tol + 1e-30))

    def s(self, name: str | None, default: float) -> float:
        return default if name is None else float(self.scalars[name])

    def head(self, k: int) -> "_Data":
        """The first ``k`` values of every buffer."""
        return _Data({n: v[:k] for n, v in self.old.items()}, {n: v[:k] for n, v in self.new.items()},
                     self.scalars, self.units)

    def all_hold(self, predicted: dict) -> bool:
        return all(self.holds(name, want) for name, want in predicted.items())


def _data(probe, outputs: dict, scalars: dict, changed: dict | None = None) -> _Data:
    old = {n: v for n, v in probe.values.items()}
    if changed:
        old.update({n: np.asarray(v, dtype=np.float64).reshape(-1) for n, v in changed.items()})
    units = {a.name: _UNIT.get(a.param.dtype.name, 2.0 ** -24) for a in probe.task.args if a.is_buffer}
    return _Data(old, outputs, scalars, units)


def _rerun(probe, scalars: dict, changes: dict | None = None) -> _Data | None:
    from kernel_forge.common.errors import KForgeError

    try:
        out = probe.rerun(changes or {}, scalars=scalars)
    except (KForgeError, ValueError):
        return None
    stored = {}
    for name, vals in (changes or {}).items():     # the changed inputs as the reference saw them (stored)
        stored[name] = probe.stored(name, vals)
    return _data(probe, out, {**probe.scalars, **scalars}, stored)


def find_optimizer_step(probe) -> Iterator[Match]:
    outs = probe.buffers(output=True)
    if not 2 <= len(outs) <= 4 or any(not probe.arg(o).param.dtype.is_float for o in outs):
        return
    if sum(not probe.arg(o).in_out for o in outs) > (len(outs) == 4):     # only a master's copy may be write-only
        return
    n = probe.sizes[outs[0]]
    if n == 0 or any(probe.sizes[o] != n for o in outs):
        return
    grads = [g for g in probe.inputs_of(n) if g not in outs]
    floats = list(probe.float_scalars())
    if not grads or not 2 <= len(floats) <= len(TELL):
        return
    here_all = _data(probe, probe.outputs, dict(probe.scalars))
    here = here_all.head(SAMPLE)
    adam = len(outs) >= 3
    first = _adam_moments if adam else _sgd_buffers
    if not any(True for _ in first(here, outs, grads, floats)):     # the moment update: no rerun when it fails
        return
    tell_all = _rerun(probe, dict(zip(floats, TELL)))
    if tell_all is None:
        return
    tell = tell_all.head(SAMPLE)
    n_name = param_for(probe, n)
    ints = [k for k in probe.int_scalars() if k != n_name]
    found = _adam(probe, tell, here, outs, grads, floats, ints) if adam else _sgd(tell, here, outs, grads, floats)
    step = _adam_step if adam else _sgd_step
    for r, binding, params in found:
        eps = params.get("eps")
        if all(d.all_hold(step(d, r, eps) if adam else step(d, r)) for d in (tell_all, here_all)):
            yield Match("optimizer_step", {**binding, "n": n_name}, params)
    return


# ----------------------------------------------------------------------------- Adam / AdamW

def _adam_moments(d: _Data, outs, grads, floats):
    """(p, m, v, g, beta1, beta2, l2 decay, grad scale, copy) whose two moment updates hold on ``d``
    (``copy``: a fourth output, the master's low-precision copy, else None)."""
    for p, m, v in itertools.permutations(outs, 3):
        copy = next((o for o in outs if o not in (p, m, v)), None)
        for g in grads:
            for gs in [None, *floats]:                      # a gradient scale: gs * g
                for wd in [None, *floats]:                  # L2 decay: the gradient is gs * g + wd * p first
                    if wd is not None and wd == gs:
                        continue
                    ge = d.s(gs, 1.0) * d.old[g] + (d.s(wd, 0.0) * d.old[p] if wd else 0.0)
                    for b1 in floats:
                        if b1 in (wd, gs) or not d.holds(m, _lerp(d.old[m], ge, d.s(b1, 0.0))):
                            continue
                        for b2 in floats:
                            if b2 not in (b1, wd, gs) and d.holds(v, _lerp(d.old[v], ge * ge, d.s(b2, 0.0))):
                                yield p, m, v, g, b1, b2, wd, gs, copy


def _lerp(old, new, beta):
    return beta * old + (1.0 - beta) * new


def _adam_step(d: _Data, r: dict, eps_value: float | None = None) -> dict[str, np.ndarray]:
    """The new parameter values and moments under the roles ``r`` on ``d``."""
    p, g = d.old[r["param"]], d.s(r.get("grad_scale"), 1.0) * d.old[r["grad"]]
    l2 = r["decay"] == "l2"
    ge = g + (d.s(r["weight_decay"], 0.0) * p if l2 else 0.0)
    b1, b2 = d.s(r["beta1"], 0.0), d.s(r["beta2"], 0.0)
    m = _lerp(d.old[r["m"]], ge, b1)
    v = _lerp(d.old[r["v"]], ge * ge, b2)
    if r["correction"] == "given":
        c1, c2 = d.s(r["beta1_correction"], 1.0), d.s(r["beta2_correction"], 1.0)
    elif r["correction"] == "step":
        t = d.s(r["step"], 1.0)
        c1, c2 = 1.0 - b1 ** t, 1.0 - b2 ** t
    else:
        c1 = c2 = 1.0
    eps = d.s(r["eps"], 0.0) if eps_value is None else eps_value
    wd = d.s(r["weight_decay"], 0.0) if r["decay"] == "decoupled" else 0.0
    new = p - d.s(r["lr"], 0.0) * ((m / c1) / (np.sqrt(v / c2) + eps) + wd * p)
    return {r["param"]: new, r["m"]: m, r["v"]: v, **({r["copy"]: new} if r.get("copy") else {})}


def _adam(probe, tell: _Data, here: _Data, outs, grads, floats, ints):
    """(roles, binding, params) of every Adam step whose moments and parameter update hold on the
    telling run and on the probe's own values (the first few values of each)."""
    tiny: dict = {}            #: (grad, m, v) -> the rerun of tiny moments (a constant epsilon's)
    for p, m, v, g, b1, b2, l2, gs, copy in _adam_moments(tell, outs, grads, floats):
        rest = [f for f in floats if f not in (b1, b2, l2, gs)]
        base = {"param": p, "grad": g, "m": m, "v": v, "beta1": b1, "beta2": b2, "grad_scale": gs, "copy": copy}
        corrections = [("given", {"beta1_correction": c1, "beta2_correction": c2})
                       for c1, c2 in itertools.permutations(rest, 2)]
        corrections += [("none", {})] + [("step", {"step": t}) for t in ints]
        decays = [("l2", l2)] if l2 else [("decoupled", wd) for wd in rest] + [("none", None)]
        for lr in rest:
            for correction, cr in corrections:
                for decay, wd in decays:
                    used = {lr, *cr.values(), *([wd] if wd is not None else [])}
                    if len(used) != 1 + (wd is not None) + len(cr):
                        continue
                    for eps in [e for e in rest if e not in used] + [None]:
                        r = {**base, "lr": lr, "eps": eps, "weight_decay": wd, "correction": correction,
                             "decay": decay, "beta1_correction": None, "beta2_correction": None, "step": None, **cr}
                        const = None
                        if eps is None:           # a constant: no trace on the telling run, read it off tiny moments
                            if not tell.holds(p, _adam_step(tell, r, 0.0)[p]):
                                continue
                            const = _read_eps(probe, r, floats, tiny)
                            if const is None:
                                continue
                        if not all(d.holds(p, _adam_step(d, r, const)[p]) for d in (tell, here)):
                            continue
                        binding = {k: r[k] for k in ("param", "grad", "m", "v", "lr", "beta1", "beta2",
                                                     "beta1_correction", "beta2_correction", "step", "eps",
                                                     "weight_decay")}
                        binding.update({k: r[k] for k in ("grad_scale", "copy") if r[k]})
                        params = {"rule": "adamw" if decay == "decoupled" else "adam", "decay": decay,
                                  "correction": correction}
                        if const is not None:
                            params["eps"] = const
                        yield r, binding, params


def _read_eps(probe, r: dict, floats, tiny: dict) -> float | None:
    """The constant epsilon of a reference that takes none: the first of :data:`EPSILONS` that
    predicts a rerun whose gradients and moments are tiny (sqrt(v) ~ 1e-7, where the epsilons
    differ); None when none does or the reference cannot be rerun.  float16 storage cannot hold
    such moments: there the usual 1e-8 is taken (the binding is still checked on both runs)."""
    key = (r["grad"], r["m"], r["v"])
    if any(probe.arg(b).param.dtype.name == "float16" for b in key):
        return EPSILONS[0]       # moments that small are below float16's range: the usual one, checked as the rest
    if key not in tiny:
        g, m, v = probe.values[r["grad"]], probe.values[r["m"]], probe.values[r["v"]]
        changes = {r["grad"]: g * 1e-7, r["m"]: m * 1e-7, r["v"]: np.abs(v) * 1e-14}
        rerun = _rerun(probe, dict(zip(floats, TELL)), changes)
        tiny[key] = rerun.head(SAMPLE) if rerun is not None else None
    d = tiny[key]
    if d is None:
        return None
    return next((e for e in EPSILONS if d.holds(r["param"], _adam_step(d, r, e)[r["param"]])), None)


# ----------------------------------------------------------------------------- SGD with momentum

def _sgd_buffers(d: _Data, outs, grads, floats):
    """(p, buf, g, momentum, dampening, wd) whose momentum buffer update holds on ``d``."""
    for p, buf in itertools.permutations(outs, 2):
        for g in grads:
            for wd in [None, *floats]:
                ge = d.old[g] + (d.s(wd, 0.0) * d.old[p] if wd else 0.0)
                for mu in floats:
                    if mu == wd:
                        continue
                    for damp in [None, *floats]:
                        if damp in (mu, wd) and damp is not None:
                            continue
                        if d.holds(buf, d.s(mu, 0.0) * d.old[buf] + (1.0 - d.s(damp, 0.0)) * ge):
                            yield p, buf, g, mu, damp, wd


def _sgd_step(d: _Data, r: dict) -> dict[str, np.ndarray]:
    """The new parameter values and momentum buffer under the roles ``r`` on ``d``."""
    p, g = d.old[r["param"]], d.old[r["grad"]]
    ge = g + (d.s(r["weight_decay"], 0.0) * p if r["weight_decay"] else 0.0)
    mu = d.s(r["momentum"], 0.0)
    buf = mu * d.old[r["buf"]] + (1.0 - d.s(r["dampening"], 0.0)) * ge
    return {r["param"]: p - d.s(r["lr"], 0.0) * ((ge + mu * buf) if r["nesterov"] else buf), r["buf"]: buf}


def _sgd(tell: _Data, here: _Data, outs, grads, floats):
    """(roles, binding, params) of every SGD step whose buffer and parameter update hold on the
    telling run and on the probe's own values (the first few values of each)."""
    for p, buf, g, mu, damp, wd in _sgd_buffers(tell, outs, grads, floats):
        for lr in [f for f in floats if f not in (mu, damp, wd)]:
            for nesterov in (False, True):
                r = {"param": p, "grad": g, "buf": buf, "lr": lr, "momentum": mu, "dampening": damp,
                     "weight_decay": wd, "nesterov": nesterov}
                if tell.holds(p, _sgd_step(tell, r)[p]) and here.holds(p, _sgd_step(here, r)[p]):
                    binding = {k: r[k] for k in ("param", "grad", "buf", "lr", "momentum", "dampening", "weight_decay")}
                    yield r, binding, {"rule": "sgd_momentum", "nesterov": nesterov, "decay": "l2" if wd else "none"}
