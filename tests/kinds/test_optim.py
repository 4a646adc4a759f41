"""kernel_forge/kinds/optim.py: optimizer steps (Adam, AdamW, SGD with momentum) read from a reference and bound."""
from __future__ import annotations

from kernel_forge.kinds import identify
from kernel_forge.kinds.bind import instantiate
from kernel_forge.model.task import load_task

from tests.support.kind_tasks import check_match, copy_task


def test_plain_adam_has_no_weight_decay_and_is_bound_without_one(tmp_path):
    """Adam = AdamW with weight_decay 0: a signature without one, the bias corrections from the step."""
    ref = ("def adam_plain(exp_avg, exp_avg_sq, param, grad, step, lr, beta1, beta2, n):\n"
           "    g = grad.astype(np.float64); m = beta1 * exp_avg + (1 - beta1) * g\n"
           "    v = beta2 * exp_avg_sq + (1 - beta2) * g * g\n"
           "    param[...] = param - lr * (m / (1 - beta1 ** step)) / (np.sqrt(v / (1 - beta2 ** step)) + 1e-8)\n"
           "    exp_avg[...] = m; exp_avg_sq[...] = v\n")

    def edit(d):
        d["signature"] = d["signature"].replace("int step, float weight_decay,", "int step,").replace("adamw_torch", "adam_plain")
        d["name"] = "adam_plain"
        del d["args"]["weight_decay"]
        d["reference"] = {"python": "refs.py:adam_plain"}

    task = load_task(copy_task(tmp_path, "adamw_torch", edit, ref))
    found = identify(task)
    check_match(found, "optimizer_step", {"param": "param", "m": "exp_avg", "v": "exp_avg_sq", "lr": "lr", "step": "step",
                                     "weight_decay": None}, {"rule": "adam", "decay": "none", "correction": "step"})
    [bound] = instantiate(task, found.match)
    assert "#define KF_DECAY_DECOUPLED 0" in bound.source and "#define KF_DECAY_L2 0" in bound.source
    assert "(1.0f - powf((float)(beta1), (float)(step)))" in bound.source and ", 1e-08f, 0.0f, 1.0f);" in bound.source


def test_nesterov_momentum_is_read_and_bound(tmp_path):
    ref = ("def sgd_nesterov(grad, momentum_buf, param, lr, momentum, dampening, weight_decay, n):\n"
           "    g = grad + weight_decay * param; b = momentum * momentum_buf + (1 - dampening) * g\n"
           "    param[...] = param - lr * (g + momentum * b); momentum_buf[...] = b\n")
    task = load_task(copy_task(tmp_path, "sgd_momentum", lambda d: d.update(reference={"python": "refs.py:sgd_nesterov"}),
                           ref))
    found = identify(task)
    check_match(found, "optimizer_step", {"buf": "momentum_buf", "momentum": "momentum", "lr": "lr"},
           {"rule": "sgd_momentum", "nesterov": True, "decay": "l2"})
    [bound] = instantiate(task, found.match)
    assert bound.label == "bound_optimizer_sgd.cu" and "#define KF_NESTEROV 1" in bound.source
