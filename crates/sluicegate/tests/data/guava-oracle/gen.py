"""Random limiter scripts for Oracle.java: gen.py SEED SCENARIOS."""
import random, sys
random.seed(int(sys.argv[1]) if len(sys.argv) > 1 else 7)
RATES = ["5.0","1.0","2.0","0.3","7.7","1000.1","0.01","3.0","0.5","12.5","2.5","0.0625","0.7","33.3","123456.7"]
BURSTS = ["1.0","0.0","0.5","2.75","10.0","0.1","1.3"]
WARMUPS = ["4000000", "1", "1000", "3333333", "10000000", "123457", "500000", "2000000", "750000"]
COLDS = ["3.0","1.0","10.0","1.5","7.3","2.0"]
def rate():
    if random.random() < 0.3:
        return "%.6g" % random.uniform(0.05, 50)
    return random.choice(RATES)
def weight():
    x = random.random()
    if x < 0.6: return 1
    if x < 0.9: return random.randint(2, 10)
    if x < 0.97: return random.randint(11, 500)
    return random.choice([10000, 2147483647 // 1000])
def sleep():
    x = random.random()
    if x < 0.15: return 0
    if x < 0.5: return random.randint(1, 300000)
    if x < 0.9: return int(random.expovariate(1/1500000))
    return random.choice([4000000, 10000000, 60000000, 1, 999])
def timeout():
    x = random.random()
    if x < 0.4: return 0
    if x < 0.8: return random.randint(1, 2000000)
    if x < 0.95: return int(random.expovariate(1/5000000))
    return 9223372036854775807
out = []
for s in range(int(sys.argv[2]) if len(sys.argv) > 2 else 12):
    if random.random() < 0.5:
        out.append(f"bursty {rate()} {random.choice(BURSTS)}")
    else:
        out.append(f"warmup {rate()} {random.choice(WARMUPS)} {random.choice(COLDS)}")
    for _ in range(random.randint(30, 60)):
        x = random.random()
        if x < 0.35: out.append(f"acquire {weight()}")
        elif x < 0.65: out.append(f"try {weight()} {timeout()}")
        elif x < 0.93: out.append(f"sleep {sleep()}")
        else: out.append(f"rate {rate()}")
print("\n".join(out))
