"""Faults past kill -9, injected into the real processes on this machine: a store that fails,
a disk that fails, a wall clock that steps, a network that is slow, lossy or cut one way.

Every fault is bounded in time (a window with an end, a deadline in the control file, a
context manager) and undone by the test; every seeded choice prints its seed; every thread
is joined with a bound and every process is ended by its PID.

The store (`s3_proxy.S3FaultProxy`): an HTTP proxy in front of moto. Give workers its `url`
as their S3 endpoint and keep the oracle on moto itself::

    with S3FaultProxy(moto_endpoint, seed=seed) as store:
        store.inject(Fault.SLOW_DOWN, duration_s=60, rate=0.3)      # 30% answered 503
        store.schedule([Window(fault=Fault.UNREACHABLE, start_s=60, end_s=180)])
        ...
        assert store.counts()[Fault.SLOW_DOWN] > 0                   # the fault happened

Faults: ``SLOW_DOWN``/``SERVICE_UNAVAILABLE`` (503), ``INTERNAL_ERROR`` (500), ``RESET`` (TCP
RST before the answer), ``LATENCY`` (``delay_s`` before forwarding), ``TIMEOUT`` (held with no
answer), ``UNREACHABLE`` (the port refuses connects). `outage()` is a with-block of 503s.

A node's disk (`disk`): for one data directory of the processes started with its `env()`::

    disk = DiskFaults(node_dir, tmp_path / "disk-control")
    proc = Proc(argv, log, env=disk.env())
    disk.set(duration_s=30, sync_eio=True)          # fsync/fdatasync/msync fail with EIO
    disk.set(duration_s=30, sync_delay_ms=2000)     # every sync takes 2 s more
    disk.set(duration_s=30, write_enospc=True)      # writes, truncates, fallocates: ENOSPC
    disk.clear(); disk.counts()

For the kernel's own full disk, run the node on a small tmpfs of its own and fill it while it
runs: ``Proc(small_tmpfs_argv(node_dir, 64 << 20, argv), log)``, then ``fill(proc.pid,
node_dir)`` and ``unfill(proc.pid, node_dir)``. The tmpfs lives as long as the process.

A wall clock (`clock.WallClock`): ``clock = WallClock(tmp_path / "clock")``; start the process
with ``env=clock.env()``; ``clock.step(3600)`` steps its wall clock an hour forward from its
next reading, ``clock.step(-3600)`` back, ``with clock.stepped(3600): ...`` for a block. Only
``CLOCK_REALTIME`` moves; monotonic time, sleeps and timed waits do not, as with an NTP step.

The network (`netproxy.TcpFaultProxy`): a forwarder in front of a TCP port, each direction
("up": client to server, "down": back) with its own `LinkFaults`::

    with TcpFaultProxy(("127.0.0.1", server_port), seed=seed) as link:
        link.set("up", LinkFaults(delay_s=0.15, loss=0.05))  # loss: retransmission stalls
        link.set("down", LinkFaults(blackhole=True))          # one-way partition
        link.heal()                                           # holed streams are closed

Between coordinators (`raft_links.RaftLinks`): one such forwarder in front of every node's Raft
port (a cluster started with ``raft_bind=True``), faults per ordered pair of nodes, whoever
dialed: ``links.set_all(LinkFaults(delay_s=0.15, loss=0.05))``, ``links.isolate_outbound(
leader)`` (nobody hears it, it hears everyone), ``links.cut_one_way(a, b)``, ``links.isolate(
node)``, ``links.heal()``.

One process under both shims: ``env=merged_env(disk.env(), clock.env())`` (`shim.merged_env`
keeps both in ``LD_PRELOAD``). The shims (diskfault.c, wallclock.c) are C, built with gcc at
first use and cached by the hash of their source (`shim.build`); `line_child.LineChild` is the
probe child the kit's own tests drive under a fault.
"""
