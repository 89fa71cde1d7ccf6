"""distinct(torch, n): n distinct PyTorch kernels run on small tensors, each
a module the driver loads at its first launch (va_room.py's and
va_maps.py's --kernels); returns their outputs, to be kept alive."""


def distinct(torch, n):
    x = torch.ones(256, 256, device="cuda")
    i = torch.arange(256, device="cuda")
    ops = [lambda: x + 1, lambda: x * 2, lambda: x.exp(), lambda: x.sin(), lambda: x.cos(),
           lambda: x.cumsum(0), lambda: x.sum(0), lambda: x.softmax(-1), lambda: torch.triu(x),
           lambda: x.index_select(0, i), lambda: torch.where(x > 0, x, -x), lambda: x.rsqrt(),
           lambda: torch.nn.functional.layer_norm(x, (256,)), lambda: x.max(0).values, lambda: x.argmax(0),
           lambda: torch.nn.functional.embedding(i, x), lambda: x.to(torch.bfloat16), lambda: x.pow(2),
           lambda: x.mean(-1), lambda: torch.nn.functional.silu(x), lambda: x.tanh(), lambda: x.clamp(0, 1),
           lambda: torch.cat([x, x]), lambda: x.transpose(0, 1).contiguous(), lambda: x.float().var(0),
           lambda: torch.nn.functional.gelu(x), lambda: x.sqrt(), lambda: x.log1p(), lambda: x.abs(), lambda: x.neg()]
    out = [f() for f in ops[:n]]
    torch.cuda.synchronize()
    return out
