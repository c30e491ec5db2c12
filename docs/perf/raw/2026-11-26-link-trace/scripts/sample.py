import time,sys
dur=float(sys.argv[1]); out=open(sys.argv[2],'w')
t0=time.monotonic()
while time.monotonic()-t0<dur:
    tx=int(open('/sys/class/net/hx/statistics/tx_bytes').read()); rx=int(open('/sys/class/net/hx/statistics/rx_bytes').read())
    out.write(f"{time.monotonic():.4f} {tx} {rx}\n"); time.sleep(0.002)
