import torch
from torch.profiler import profile, ProfilerActivity
shapes=[(3000,5000,2000),(4096,4096,4096),(8192,8192,1024),(512,512,512),(1024,1024,1024),(1024,1024,32768),(512,4096,32768),(1024,3072,768),(2048,2048,16384)]
for m,n,k in shapes:
    a=torch.randn(m,k,device="cuda",dtype=torch.bfloat16); b=torch.randn(n,k,device="cuda",dtype=torch.bfloat16)
    for _ in range(3): torch.matmul(a,b.T)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        torch.matmul(a,b.T); torch.cuda.synchronize()
    names=[e.name for e in p.events() if e.device_type.name=="CUDA"]
    print(f"{m}x{n}x{k}:", " | ".join(sorted(set(names)))[:400])
