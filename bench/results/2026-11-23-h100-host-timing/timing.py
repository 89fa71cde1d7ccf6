import subprocess,time,glob,statistics,os
def t(cmd,n=15,env=None):
    xs=[]
    for i in range(n):
        s=time.perf_counter();subprocess.run(cmd,stdout=subprocess.DEVNULL,stderr=subprocess.DEVNULL,env=env);xs.append(time.perf_counter()-s)
    return "min %.1f ms median %.1f ms"%(min(xs)*1000, statistics.median(xs)*1000)
print(open("/proc/cpuinfo").read().split("model name")[1].split("\n")[0])
print("hello", t([".gpu/bin/hello"]))
print("help", t([".gpu/bin/memplan","--help"]))
for s in sorted(glob.glob("specs/*.yaml"))+sorted(glob.glob("specs/*/*.yaml")):
    print("estimate", s, t([".gpu/bin/memplan","estimate",s]))
env=dict(os.environ, GOMAXPROCS="1")
for s in sorted(glob.glob("specs/*.yaml")):
    print("tune1", s, t([".gpu/bin/memplan","tune",s],n=5,env=env))
