#!/usr/bin/env python3
"""gen.py - writes the GSPMD examples of this folder (DESIGN Part C).

  transformer_block.json  one pre-norm transformer block (layer norm,
                          multi-head attention, MLP, residuals) on a 2x4
                          data x model mesh, written once at global shapes;
                          the partitioner inserts Megatron's two all_reduces
  mlp_train.json          a small MLP trained by SGD: STEPS computations,
                          each forward + hand-written backward (einsum) +
                          update, weights flowing step to step as edges;
                          every step outputs its loss

Run it again after changing it: python3 examples/gspmd/gen.py"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def op(o, out, **kw):
    d = {"op": o, "out": out}
    d.update(kw)
    return d


def weight(name, shape, scale, offset, sharding):
    """A deterministic, non-constant weight: iota * scale + offset, with
    its sharding (iota numbers the global tensor; the partitioner slices)."""
    n = 1
    for d in shape:
        n *= d
    return [
        op("iota", name + "_i", shape=shape),
        op("scale", name + "_s", args=[name + "_i"], factor=scale / n),
        op("fill", name + "_o", shape=[], value=offset),
        op("add", name, args=[name + "_s", name + "_o"], sharding=sharding),
    ]


def layer_norm(prefix, x, b, s, d):
    """Normalises x [b,s,d] over d (unsplit); ops and the result's name."""
    ops = [
        op("fill", prefix + "ones", shape=[d], value=1.0),
        op("reduce_sum", prefix + "sum", args=[x], axis=2),
        op("scale", prefix + "mean", args=[prefix + "sum"], factor=1.0 / d),
        op("einsum", prefix + "meanb", args=[prefix + "mean", prefix + "ones"], spec="bs,d->bsd"),
        op("sub", prefix + "xc", args=[x, prefix + "meanb"]),
        op("mul", prefix + "sq", args=[prefix + "xc", prefix + "xc"]),
        op("reduce_sum", prefix + "ssq", args=[prefix + "sq"], axis=2),
        op("scale", prefix + "var", args=[prefix + "ssq"], factor=1.0 / d),
        op("fill", prefix + "eps", shape=[], value=1e-5),
        op("add", prefix + "vare", args=[prefix + "var", prefix + "eps"]),
        op("rsqrt", prefix + "inv", args=[prefix + "vare"]),
        op("einsum", prefix + "y", args=[prefix + "xc", prefix + "inv"], spec="bsd,bs->bsd"),
    ]
    return ops, prefix + "y"


def transformer_block():
    B, S, D, H, K, F = 8, 16, 32, 4, 8, 64     # heads H of size K; MLP width F
    ops = [
        op("iota", "xi", shape=[B, S, D], sharding=["data", None, None]),
        op("scale", "x", args=["xi"], factor=1.0 / (B * S * D)),
    ]
    ops += weight("wq", [D, H, K], 0.4, -0.2, [None, "model", None])
    ops += weight("wk", [D, H, K], -0.3, 0.15, [None, "model", None])
    ops += weight("wv", [D, H, K], 0.5, -0.1, [None, "model", None])
    ops += weight("wo", [H, K, D], 0.4, -0.25, ["model", None, None])
    ops += weight("w1", [D, F], 0.3, -0.1, [None, "model"])
    ops += weight("w2", [F, D], -0.2, 0.1, ["model", None])
    ln1, h1 = layer_norm("ln1_", "x", B, S, D)
    ops += ln1
    ops += [
        op("einsum", "q", args=[h1, "wq"], spec="bsd,dhk->bshk"),
        op("einsum", "k", args=[h1, "wk"], spec="bsd,dhk->bshk"),
        op("einsum", "v", args=[h1, "wv"], spec="bsd,dhk->bshk"),
        op("einsum", "sc", args=["q", "k"], spec="bshk,bthk->bhst"),
        op("scale", "scs", args=["sc"], factor=K ** -0.5),
        op("softmax", "p", args=["scs"], axis=3),
        op("einsum", "o", args=["p", "v"], spec="bhst,bthk->bshk"),
        op("einsum", "att", args=["o", "wo"], spec="bshk,hkd->bsd"),
        op("add", "x1", args=["x", "att"], sharding=["data", None, None]),
    ]
    ln2, h2 = layer_norm("ln2_", "x1", B, S, D)
    ops += ln2
    ops += [
        op("einsum", "f", args=[h2, "w1"], spec="bsd,df->bsf"),
        op("tanh", "g", args=["f"]),
        op("einsum", "mlp", args=["g", "w2"], spec="bsf,fd->bsd"),
        op("add", "y", args=["x1", "mlp"], sharding=["data", None, None]),
    ]
    return {
        "name": "transformer-block",
        "slices": {"m": {"shape": [2, 4], "axes": ["data", "model"]}},
        "computations": [{"name": "block", "slice": "m", "global": True, "ops": ops,
                          "outputs": ["y"]}],
    }


def mlp_step(i, steps, B=16, I=8, Hd=16, O=4, lr=0.1):
    first = i == 0
    ops = []
    if first:
        ops += [
            op("iota", "w1i", shape=[I, Hd]),
            op("scale", "w1s", args=["w1i"], factor=1.0 / (I * Hd)),
            op("fill", "w1c", shape=[], value=-0.25),
            op("add", "w1", args=["w1s", "w1c"], sharding=[None, "model"]),
            op("fill", "w2", shape=[Hd, O], value=0.05, sharding=["model", None]),
        ]
    else:
        ops += [
            op("input", "w1", **{"from": "step%d.w1n" % (i - 1)}),
            op("input", "w2", **{"from": "step%d.w2n" % (i - 1)}),
        ]
    ops += [
        # data: x = iota / (B*I), target = tanh(x) . 0.5 (a teacher the model can fit)
        op("iota", "xi", shape=[B, I], sharding=["data", None]),
        op("scale", "x", args=["xi"], factor=1.0 / (B * I)),
        op("fill", "wt", shape=[I, O], value=0.5),
        op("tanh", "xt", args=["x"]),
        op("einsum", "yt", args=["xt", "wt"], spec="bi,io->bo"),
        # forward
        op("einsum", "h", args=["x", "w1"], spec="bi,ih->bh"),
        op("tanh", "a", args=["h"]),
        op("einsum", "yp", args=["a", "w2"], spec="bh,ho->bo"),
        op("sub", "err", args=["yp", "yt"]),
        op("mul", "err2", args=["err", "err"]),
        op("reduce_sum", "sse", args=["err2"]),
        op("scale", "loss", args=["sse"], factor=1.0 / B),
        # backward (hand-written)
        op("scale", "dyp", args=["err"], factor=2.0 / B),
        op("einsum", "dw2", args=["a", "dyp"], spec="bh,bo->ho"),
        op("einsum", "da", args=["dyp", "w2"], spec="bo,ho->bh"),
        op("mul", "a2", args=["a", "a"]),
        op("fill", "one", shape=[], value=1.0),
        op("sub", "dtanh", args=["one", "a2"]),
        op("mul", "dh", args=["da", "dtanh"]),
        op("einsum", "dw1", args=["x", "dh"], spec="bi,bh->ih"),
        # SGD
        op("scale", "u1", args=["dw1"], factor=lr),
        op("sub", "w1n", args=["w1", "u1"], sharding=[None, "model"]),
        op("scale", "u2", args=["dw2"], factor=lr),
        op("sub", "w2n", args=["w2", "u2"], sharding=["model", None]),
    ]
    return {"name": "step%d" % i, "slice": "m", "global": True, "ops": ops,
            "outputs": ["w1n", "w2n", "loss"]}


def mlp_train(steps=8):
    return {
        "name": "mlp-train",
        "slices": {"m": {"shape": [2, 2], "axes": ["data", "model"]}},
        "computations": [mlp_step(i, steps) for i in range(steps)],
    }


for name, doc in (("transformer_block.json", transformer_block()),
                  ("mlp_train.json", mlp_train())):
    with open(os.path.join(HERE, name), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
