"""Does the driver's PTX JIT keep setmaxnreg where nvJitLink drops it (info C7504)? Builds the D=128
attention kernel with 3 consumer warpgroups (128 registers each without rebalancing: it spills) with
setmaxnreg 24/160 (nvJitLink fails: C7600, allocation failed at 128), loads it from nvJitLink's cubin
and from PTX through cuModuleLoadData, and prints each function's registers and local (spill) bytes."""
import dataclasses
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from pkptx.launch import Device  # noqa: E402
from pkptx.launch.driver import call, driver  # noqa: E402
from pkptx.templates.kernels import attention as K  # noqa: E402
from pkptx.toolchain import assemble  # noqa: E402

Device(0).set_current()
cfg = K.Config(head_dim=128, consumers=3, q_stages=1, stages=1)
for rebalance in (False, True):
    t = dataclasses.replace(K.template(cfg), rebalance=rebalance, producer_regs=24, consumer_regs=160)
    kern = t.build(**K.roles(cfg), epilogue=lambda ctx: ctx.b.bulk_wait_group(0))
    ptx = kern.render()
    try:
        images = [("nvJitLink", assemble(ptx, "sm_90a", use_cache=False).data)]
    except Exception as exc:        # noqa: BLE001 - the point of the probe
        print(f"rebalance={rebalance} nvJitLink: {str(exc).splitlines()[1][:120]}")
        images = []
    attr = driver().CUfunction_attribute
    for how, image in images + [("driver JIT", ptx.encode() + b"\0")]:
        try:
            module = call("cuModuleLoadData", image)
        except Exception as exc:    # noqa: BLE001
            print(f"rebalance={rebalance} {how}: {exc}")
            continue
        fn = call("cuModuleGetFunction", module, kern.name.encode())
        regs = call("cuFuncGetAttribute", attr.CU_FUNC_ATTRIBUTE_NUM_REGS, fn)
        local = call("cuFuncGetAttribute", attr.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, fn)
        print(f"rebalance={rebalance} {how}: registers {regs}, local bytes {local}", flush=True)
