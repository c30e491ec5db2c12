#!/usr/bin/env python3
"""Writes the synthetic nodes of this folder (docs/topology.md): hwloc XML that chorus loads with CHORUS_TOPO_FILE or
`chorus-topo --file`, and that `lstopo -i FILE` draws; and the DGX H100-like node again in NCCL's own topology format
(nccl-dgx-h100.xml), which NCCL_TOPO_FILE users have.

They are written from public descriptions of such machines, not dumped from real ones: CPU counts, PCI ids and
link speeds are the products', while bus numbers and the exact PCI trees are made up to be plausible (the tree is
what decides the distance classes, and tests/unit/core_topo_test.cc checks them). Caches are left out.

usage: python3 topo/gen_nodes.py [OUTDIR]   (default: this script's folder)
"""
import os
import sys


class Gen:
    def __init__(self):
        self.gp = 0
        self.lines = []

    def gpi(self):
        self.gp += 1
        return self.gp

    def out(self, depth, text):
        self.lines.append("  " * depth + text)


def bitmap(bits):
    """hwloc's bitmap text: 32-bit words, most significant first."""
    value = 0
    for b in bits:
        value |= 1 << b
    words = []
    while True:
        words.append(value & 0xFFFFFFFF)
        value >>= 32
        if value == 0:
            break
    return ",".join("0x%08x" % w for w in reversed(words))


def esc(s):
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


GEN5_X16 = "63.015385"  # GB/s: 32 GT/s x 16 lanes x 128/130, hwloc's pci_link_speed
GEN4_X16 = "31.507692"
GEN3_X8 = "7.876923"


def sets(cpus, nodes):
    c, n = bitmap(cpus), bitmap(nodes)
    return 'cpuset="%s" complete_cpuset="%s" nodeset="%s" complete_nodeset="%s"' % (c, c, n, n)


def pci(g, depth, busid, cls, ids, subids, rev, speed, infos, children=()):
    """A PCI function; children are callables writing its OS devices."""
    g.out(depth, '<object type="PCIDev" gp_index="%d" pci_busid="%s" pci_type="%04x [%s] [%s] %02x" '
          'pci_link_speed="%s">' % (g.gpi(), busid, cls, ids, subids, rev, speed))
    for k, v in infos:
        g.out(depth + 1, '<info name="%s" value="%s"/>' % (k, esc(v)))
    for c in children:
        c(g, depth + 1)
    g.out(depth, "</object>")


def osdev(name, kind, infos=()):
    # osdev_type: 1 GPU (DRM), 2 network interface, 3 OpenFabrics (RDMA) device.
    def write(g, depth):
        if not infos:
            g.out(depth, '<object type="OSDev" gp_index="%d" name="%s" osdev_type="%d"/>' % (g.gpi(), name, kind))
            return
        g.out(depth, '<object type="OSDev" gp_index="%d" name="%s" osdev_type="%d">' % (g.gpi(), name, kind))
        for k, v in infos:
            g.out(depth + 1, '<info name="%s" value="%s"/>' % (k, esc(v)))
        g.out(depth, "</object>")
    return write


def bridge(g, depth, busid, sec, sub, ids, speed, body, bdepth, subids="0000:0000"):
    """A PCI-to-PCI bridge (root port or switch port) whose secondary buses are [sec-sub]."""
    g.out(depth, '<object type="Bridge" gp_index="%d" bridge_type="1-1" depth="%d" bridge_pci="0000:[%02x-%02x]" '
          'pci_busid="%s" pci_type="0604 [%s] [%s] 00" pci_link_speed="%s">' % (g.gpi(), bdepth, sec, sub, busid,
                                                                              ids, subids, speed))
    body(g, depth + 1)
    g.out(depth, "</object>")


def host_bridge(g, depth, first, last, body):
    g.out(depth, '<object type="Bridge" gp_index="%d" bridge_type="0-1" depth="0" bridge_pci="0000:[%02x-%02x]">'
          % (g.gpi(), first, last))
    body(g, depth + 1)
    g.out(depth, "</object>")


def node(path, name, packages, cores_per_pkg, cpu_vendor, cpu_model, mem_per_numa, io_of_package, facts):
    """A 2-way SMT machine, one NUMA node per package; io_of_package(g, depth, p) writes package p's PCI trees."""
    g = Gen()
    npus = packages * cores_per_pkg * 2
    ncores = packages * cores_per_pkg
    allc = range(npus)
    alln = range(packages)
    g.out(0, '<?xml version="1.0" encoding="UTF-8"?>')
    g.out(0, '<!DOCTYPE topology SYSTEM "hwloc2.dtd">')
    g.out(0, '<topology version="2.0">')
    c = bitmap(allc)
    n = bitmap(alln)
    g.out(1, '<object type="Machine" os_index="0" cpuset="%s" complete_cpuset="%s" allowed_cpuset="%s" nodeset="%s" '
          'complete_nodeset="%s" allowed_nodeset="%s" gp_index="%d">' % (c, c, c, n, n, n, g.gpi()))
    for k, v in [("DMIProductName", name), ("HostName", os.path.splitext(os.path.basename(path))[0]),
                 ("Architecture", "x86_64")] + facts:
        g.out(2, '<info name="%s" value="%s"/>' % (k, esc(v)))
    for p in range(packages):
        # Linux numbering: the first thread of every core, then the second threads.
        cores = [p * cores_per_pkg + i for i in range(cores_per_pkg)]
        pus = cores + [x + ncores for x in cores]
        g.out(2, '<object type="Package" os_index="%d" %s gp_index="%d">' % (p, sets(pus, [p]), g.gpi()))
        g.out(3, '<info name="CPUVendor" value="%s"/>' % cpu_vendor)
        g.out(3, '<info name="CPUModel" value="%s"/>' % esc(cpu_model))
        g.out(3, '<object type="NUMANode" os_index="%d" %s gp_index="%d" local_memory="%d"/>'
              % (p, sets(pus, [p]), g.gpi(), mem_per_numa))
        for i, core in enumerate(cores):
            g.out(3, '<object type="Core" os_index="%d" %s gp_index="%d">' % (i, sets([core, core + ncores], [p]),
                                                                             g.gpi()))
            for pu in (core, core + ncores):
                g.out(4, '<object type="PU" os_index="%d" %s gp_index="%d"/>' % (pu, sets([pu], [p]), g.gpi()))
            g.out(3, "</object>")
        io_of_package(g, 3, p)
        g.out(2, "</object>")
    g.out(1, "</object>")
    g.out(0, "</topology>")
    with open(path, "w") as f:
        f.write("\n".join(g.lines) + "\n")


# ---- DGX H100-like: 2 x Xeon Platinum 8480C (56 cores), 8 H100 SXM5 behind 4 PCIe Gen5 switches, 8 ConnectX-7
# 400 Gb/s (InfiniBand NDR), one per GPU on the GPU's switch; 4 NVSwitches give every GPU pair 18 NVLinks.
H100 = dict(cls=0x0302, ids="10de:2330", subids="10de:16c1", rev=0xa1, name="GH100 [H100 SXM5 80GB]")
CX7 = dict(ids="15b3:1021", subids="15b3:0041", rev=0x00, name="MT2910 Family [ConnectX-7]")
PEX = "1000:c030"  # Broadcom PEX890xx Gen5 switch
DGX_SWITCH_ROOT = [0x15, 0x3f, 0x95, 0xbf]  # root bus of switch s; switches 0-1 on package 0, 2-3 on package 1


def dgx_io(g, depth, p):
    for s in (2 * p, 2 * p + 1):
        r = DGX_SWITCH_ROOT[s]

        def downstream(g, depth, s=s, r=r):
            # Downstream ports r+2:00.0-03.0 lead to NIC, GPU, NIC, GPU on buses r+3 .. r+6.
            for k in range(4):
                bus = r + 3 + k
                gpu = k % 2 == 1
                idx = 2 * s + k // 2

                def dev(g, depth, bus=bus, gpu=gpu, idx=idx):
                    if gpu:
                        pci(g, depth, "0000:%02x:00.0" % bus, H100["cls"], H100["ids"], H100["subids"], H100["rev"],
                            GEN5_X16, [("PCIVendor", "NVIDIA Corporation"), ("PCIDevice", H100["name"])])
                    else:
                        pci(g, depth, "0000:%02x:00.0" % bus, 0x0207, CX7["ids"], CX7["subids"], CX7["rev"],
                            GEN5_X16, [("PCIVendor", "Mellanox Technologies"), ("PCIDevice", CX7["name"])],
                            [osdev("mlx5_%d" % idx, 3, [("NodeGUID", "a088:c203:00%02x:0000" % idx),
                                                        ("Port1State", "4"), ("Port1LID", "0x%x" % (idx + 1))]),
                             osdev("ibp%ds0" % bus, 2, [("Address", "00:00:10:49:fe:80:00:00:00:00:00:00:a0:88:c2:"
                                                                   "03:00:%02x:00:00" % idx)])])

                bridge(g, depth, "0000:%02x:%02x.0" % (r + 2, k), bus, bus, PEX, GEN5_X16, dev, 3)

        def upstream(g, depth, r=r, downstream=downstream):
            bridge(g, depth, "0000:%02x:00.0" % (r + 1), r + 2, r + 6, PEX, GEN5_X16, downstream, 2)

        def root_port(g, depth, r=r, upstream=upstream):
            bridge(g, depth, "0000:%02x:01.0" % r, r + 1, r + 6, "8086:352a", GEN5_X16, upstream, 1)

        host_bridge(g, depth, r, r + 6, root_port)


def dgx_facts():
    gpus = ["0000:%02x:00.0" % (DGX_SWITCH_ROOT[s] + 3 + k) for s in range(4) for k in (1, 3)]
    nics = ["0000:%02x:00.0" % (DGX_SWITCH_ROOT[s] + 3 + k) for s in range(4) for k in (0, 2)]
    facts = [("ChorusVersion", "1")]
    for i, b in enumerate(nics):
        facts.append(("ChorusNIC", "index=%d name=mlx5_%d busid=%s speed_mbps=400000" % (i, i, b)))
    for a in range(8):
        for b in range(a + 1, 8):
            facts.append(("ChorusGPULink", "a=%s b=%s kind=NVLink count=18" % (gpus[a], gpus[b])))
    return facts


# ---- MI300X node: 2 x EPYC 9654 (96 cores), 8 MI300X (class 0x1200, processing accelerator) with xGMI between
# every pair, 8 ConnectX-7 400 GbE (RoCE). Per host bridge an upper Gen5 switch feeds two lower switches, each
# holding one GPU and its NIC: GPU-own NIC PIX, the neighbour pair's NIC PXB.
MI300X = dict(cls=0x1200, ids="1002:74a1", subids="1002:74a1", rev=0x00, name="Aqua Vanjaram [Instinct MI300X]")
MI_ROOT = [0x00, 0x20, 0x80, 0xa0]  # host bridges 0-1 on package 0, 2-3 on package 1


def mi_io(g, depth, p):
    for h in (2 * p, 2 * p + 1):
        r = MI_ROOT[h]

        def upper_down(g, depth, h=h, r=r):
            for k in range(2):
                base = r + 3 + 4 * k  # lower switch upstream bus
                idx = 2 * h + k

                def lower_down(g, depth, base=base, idx=idx):
                    gbus, nbus = base + 2, base + 3

                    def gdev(g, depth, gbus=gbus, idx=idx):
                        pci(g, depth, "0000:%02x:00.0" % gbus, MI300X["cls"], MI300X["ids"], MI300X["subids"],
                            MI300X["rev"], GEN5_X16, [("PCIVendor", "Advanced Micro Devices, Inc. [AMD/ATI]"),
                                                      ("PCIDevice", MI300X["name"])],
                            [osdev("card%d" % (idx + 1), 1), osdev("renderD%d" % (128 + idx), 1)])

                    def ndev(g, depth, nbus=nbus, idx=idx):
                        pci(g, depth, "0000:%02x:00.0" % nbus, 0x0200, CX7["ids"], CX7["subids"], CX7["rev"],
                            GEN5_X16, [("PCIVendor", "Mellanox Technologies"), ("PCIDevice", CX7["name"])],
                            [osdev("mlx5_%d" % idx, 3, [("NodeGUID", "b8ce:f603:00%02x:0000" % idx)]),
                             osdev("enp%ds0np0" % nbus, 2, [("Address", "b8:ce:f6:00:%02x:00" % idx)])])

                    bridge(g, depth, "0000:%02x:00.0" % (base + 1), gbus, gbus, PEX, GEN5_X16, gdev, 5)
                    bridge(g, depth, "0000:%02x:01.0" % (base + 1), nbus, nbus, PEX, GEN5_X16, ndev, 5)

                def lower_up(g, depth, base=base, lower_down=lower_down):
                    bridge(g, depth, "0000:%02x:00.0" % base, base + 1, base + 3, PEX, GEN5_X16, lower_down, 4)

                bridge(g, depth, "0000:%02x:%02x.0" % (r + 2, k), base, base + 3, PEX, GEN5_X16, lower_up, 3)

        def upper_up(g, depth, r=r, upper_down=upper_down):
            bridge(g, depth, "0000:%02x:00.0" % (r + 1), r + 2, r + 10, PEX, GEN5_X16, upper_down, 2)

        def root_port(g, depth, r=r, upper_up=upper_up):
            bridge(g, depth, "0000:%02x:01.1" % r, r + 1, r + 10, "1022:14ab", GEN5_X16, upper_up, 1)

        host_bridge(g, depth, r, r + 10, root_port)


def mi_facts():
    gpus = ["0000:%02x:00.0" % (MI_ROOT[h] + 3 + 4 * k + 2) for h in range(4) for k in range(2)]
    nics = ["0000:%02x:00.0" % (MI_ROOT[h] + 3 + 4 * k + 3) for h in range(4) for k in range(2)]
    facts = [("ChorusVersion", "1")]
    for i, b in enumerate(nics):
        facts.append(("ChorusNIC", "index=%d name=mlx5_%d busid=%s speed_mbps=400000" % (i, i, b)))
    for a in range(8):
        for b in range(a + 1, 8):
            facts.append(("ChorusGPULink", "a=%s b=%s kind=xGMI count=1" % (gpus[a], gpus[b])))
    return facts


# ---- A plain 2-socket CPU host: 2 x Xeon Silver 4314 (16 cores), the BMC's ASPEED VGA (a display device that is
# not a GPU), an Intel X710 10 GbE on package 0, an Intel E810 100 GbE on package 1, and docker0 (virtual).
def cpu_io(g, depth, p):
    if p == 0:
        def vga(g, depth):
            pci(g, depth, "0000:03:00.0", 0x0300, "1a03:2000", "1a03:2000", 0x52, "0.000000",
                [("PCIVendor", "ASPEED Technology, Inc."), ("PCIDevice", "ASPEED Graphics Family")])

        def ast_bridge(g, depth):
            bridge(g, depth, "0000:02:00.0", 3, 3, "1a03:1150", "0.000000", vga, 2)

        def rp0(g, depth):
            bridge(g, depth, "0000:00:1c.0", 2, 3, "8086:a190", GEN3_X8, ast_bridge, 1)

        host_bridge(g, depth, 0x00, 0x03, rp0)

        def x710(g, depth):
            pci(g, depth, "0000:3d:00.0", 0x0200, "8086:1572", "8086:0006", 0x02, GEN3_X8,
                [("PCIVendor", "Intel Corporation"), ("PCIDevice", "Ethernet Controller X710 for 10GbE SFP+")],
                [osdev("eno1", 2, [("Address", "3c:fd:fe:00:00:01")])])

        def rp1(g, depth):
            bridge(g, depth, "0000:3a:02.0", 0x3d, 0x3d, "8086:347a", GEN3_X8, x710, 1)

        host_bridge(g, depth, 0x3a, 0x3d, rp1)
    else:
        def e810(g, depth):
            pci(g, depth, "0000:98:00.0", 0x0200, "8086:159b", "8086:0003", 0x02, GEN4_X16,
                [("PCIVendor", "Intel Corporation"), ("PCIDevice", "Ethernet Controller E810-C for QSFP")],
                [osdev("ens801f0", 2, [("Address", "b4:96:91:00:00:01")])])

        def rp(g, depth):
            bridge(g, depth, "0000:97:02.0", 0x98, 0x98, "8086:347a", GEN4_X16, e810, 1)

        host_bridge(g, depth, 0x97, 0x98, rp)


def cpu_facts():
    return [("ChorusVersion", "1"),
            ("ChorusNIC", "index=0 name=eno1 busid=0000:3d:00.0 speed_mbps=10000"),
            ("ChorusNIC", "index=1 name=ens801f0 busid=0000:98:00.0 speed_mbps=100000"),
            ("ChorusNIC", "index=2 name=docker0 virtual=1 speed_mbps=0")]


def cpumask(cpus):
    """A CPU mask as NCCL writes affinity (sysfs cpumap): 32-bit hex words, most significant first, no 0x."""
    return ",".join(w[2:] for w in bitmap(cpus).split(","))


def nccl_dgx(path):
    """The DGX H100-like node of dgx-h100.xml in NCCL's own topology format (<system>), as NCCL_TOPO_DUMP_FILE writes
    it: a <cpu> per NUMA node, each PCIe switch flattened to one <pci> element (its upstream port), the NVSwitch
    links as one <nvlink> of 18 per GPU. The same bus ids, so both files must give chorus the same view."""
    lines = ['<system version="1">']
    cores_per_pkg, ncores = 56, 112
    for p in range(2):
        cores = [p * cores_per_pkg + i for i in range(cores_per_pkg)]
        pus = cores + [x + ncores for x in cores]
        lines.append('  <cpu host_hash="0x5ca1ab1e" numaid="%d" affinity="%s" arch="x86_64" vendor="GenuineIntel" '
                     'familyid="6" modelid="143">' % (p, cpumask(pus)))
        for s in (2 * p, 2 * p + 1):
            r = DGX_SWITCH_ROOT[s]
            lines.append('    <pci busid="0000:%02x:00.0" class="0x060400" vendor="0x1000" device="0xc030" '
                         'subsystem_vendor="0x1000" subsystem_device="0xa064" link_speed="32.0 GT/s PCIe" '
                         'link_width="16">' % (r + 1))
            for k in range(4):
                bus, idx = r + 3 + k, 2 * s + k // 2
                if k % 2 == 1:
                    lines.append('      <pci busid="0000:%02x:00.0" class="0x030200" vendor="0x10de" device="0x2330" '
                                 'subsystem_vendor="0x10de" subsystem_device="0x16c1" link_speed="32.0 GT/s PCIe" '
                                 'link_width="16">' % bus)
                    lines.append('        <gpu dev="%d" sm="90" rank="%d" gdr="1">' % (idx, idx))
                    lines.append('          <nvlink target="fffffff:ffff:ff.0" count="18" tclass="0x068000"/>')
                    lines.append("        </gpu>")
                else:
                    lines.append('      <pci busid="0000:%02x:00.0" class="0x020700" vendor="0x15b3" device="0x1021" '
                                 'subsystem_vendor="0x15b3" subsystem_device="0x0041" link_speed="32.0 GT/s PCIe" '
                                 'link_width="16">' % bus)
                    lines.append("        <nic>")
                    lines.append('          <net name="mlx5_%d" dev="%d" speed="400000" port="1" latency="0.000000" '
                                 'guid="0xa088c20300%02x0000" maxconn="131072" gdr="1"/>' % (idx, idx, idx))
                    lines.append("        </nic>")
                lines.append("      </pci>")
            lines.append("    </pci>")
        lines.append("  </cpu>")
    lines.append("</system>")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    node(os.path.join(out, "dgx-h100.xml"), "synthetic DGX H100-like node (topo/gen_nodes.py)", 2, 56, "GenuineIntel",
         "Intel(R) Xeon(R) Platinum 8480C", 1 << 40, dgx_io, dgx_facts())
    node(os.path.join(out, "mi300x.xml"), "synthetic MI300X node (topo/gen_nodes.py)", 2, 96, "AuthenticAMD",
         "AMD EPYC 9654 96-Core Processor", 768 << 30, mi_io, mi_facts())
    node(os.path.join(out, "cpu-2socket.xml"), "synthetic 2-socket CPU host (topo/gen_nodes.py)", 2, 16,
         "GenuineIntel", "Intel(R) Xeon(R) Silver 4314 CPU @ 2.40GHz", 128 << 30, cpu_io, cpu_facts())
    nccl_dgx(os.path.join(out, "nccl-dgx-h100.xml"))


if __name__ == "__main__":
    main()
