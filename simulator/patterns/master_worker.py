"""Master-worker task farm: per round the master sends each worker a task (MPI_Send), then waits for results with an
``MPI_Iprobe(MPI_ANY_SOURCE)`` polling loop and ``MPI_Recv`` from whoever answered first, processing each result
as it comes; a Bcast ends the round. Task sizes are heavy-tailed, so results arrive in a different order in every
run (the master's burst sequence is permuted) and the rounds are load-imbalanced. Workers alternate between an
interpreter-like kernel (front-end bound) and a branchy search (bad speculation).

Logical identity on the master follows the worker a burst serves (slot :data:`PROCESS` + worker: processing its
result, :data:`RECV` + worker: decoding its status, :data:`POLL` + worker: polling while its result is the next to
come, :data:`SEND` + worker: sending its task), not the position. Each family holds :data:`MAX_WORKERS` slots, so
that no two bursts of a run share an id (attack 23 F2: with families 100 apart, worker 50's send was the first
poll's slot 150 from 51 ranks on, and the ground truth's burst matching failed).
"""
from __future__ import annotations

import numpy as np

from synthtrace.simulator.builder import CALL, BlockBuilder
from synthtrace.simulator.kernels import kid
from synthtrace.simulator.patterns.base import SITE_CONTROL, WORLD_COMM, AppParams, Pattern, jitter

TASK_BYTES, RESULT_BYTES = 4 * 1024, 48 * 1024
TAG_TASK, TAG_RESULT = 1, 2
POLL_INS = 12_000.0  # the master's polling loop also services its own bookkeeping
#: workers a run may have: the master's four slot families of one slot per worker fill the 12-bit slot of a
#: logical id (:func:`~synthtrace.simulator.builder.logical_id`) up to 4080
MAX_WORKERS = 995
#: the first slot of each family of the master's bursts that serve one worker (+ the worker's rank)
SEND, PROCESS, RECV, POLL = (100 + k * MAX_WORKERS for k in range(4))
#: the slot of the master's first wait for a result (it serves no worker yet)
FIRST_WAIT = 50


class MasterWorker(Pattern):
    name = "master_worker"
    description = "task farm: MPI_Send tasks, MPI_Iprobe(ANY_SOURCE) polling and MPI_Recv results, Bcast per round"
    main_kernel = "interpret"
    kernels = ("interpret", "branchy_search", "reduce_results")
    sites = (("distribute", "farm.c", 64), ("collect", "farm.c", 88), ("collect", "farm.c", 91),
             ("worker_loop", "farm.c", 140), ("worker_loop", "farm.c", 152), ("end_round", "farm.c", 110))

    message_bytes = RESULT_BYTES
    max_ranks = 1 + MAX_WORKERS

    def __init__(self, params: AppParams, rng: np.random.Generator):
        super().__init__(params, rng)
        self.task_bytes = params.msg(TASK_BYTES)
        self.result_bytes = self.m

    def pairs_per_iteration(self) -> int:
        return 4 * self.P + 3 * self.P

    def block(self, b: BlockBuilder, base: np.random.Generator) -> None:
        p, P, net, shape = self.params, self.P, b.ctx.net, b.shape
        B = b.n_it
        task = np.arange(P)
        is_master = np.broadcast_to(task[None, :] == 0, shape)
        workers = np.broadcast_to(task[None, :] > 0, shape)
        t0 = b.first_starts
        if P == 1:  # no workers: the master does the work itself
            w = b.work(kid("interpret"), p.ins("interpret", 4e6, main=self.main_kernel))
            exit = b.close(t0 + w.dur, net.bcast(8, P), last=True)
            b.pair(
                w,
                t0,
                call=CALL["MPI_Bcast"],
                exit=exit,
                slot=900,
                site=self.site(5),
                coll=(8, 0, 0, WORLD_COMM),
                world=True,
            )
            b.advance(exit)
            return
        # ---- master: send one task to every worker, in worker order
        send_entry = np.zeros(shape)
        send_exit = np.zeros(shape)
        t = t0[:, 0].copy()
        copy_ns = self.task_bytes / (0.8 * net.bw)
        for wk in range(1, P):
            w = b.work(kid("poll"), 2500.0)
            entry = t + w.dur[:, 0]
            send_entry[:, wk], send_exit[:, wk] = entry, entry + net.call_ns + copy_ns
            start = np.zeros(shape)
            start[:, 0] = t
            ex = np.zeros(shape)
            ex[:, 0] = send_exit[:, wk]
            b.pair(w, start, call=CALL["MPI_Send"], exit=ex, slot=SEND + wk, site=self.site(0), mask=is_master,
                   p2p=(self.task_bytes, 0, wk, TAG_TASK, 1))
            t = send_exit[:, wk]
        master_free = t
        # ---- workers: receive the task, compute, send the result back
        arrive_task = send_entry + net.p2p(np.zeros(P, np.int64)[None, :], task[None, :], self.task_bytes)
        w = b.work(kid("poll"), 1500.0)
        recv_entry = t0 + w.dur
        recv_exit = np.maximum(recv_entry + net.call_ns, arrive_task + 300.0)
        b.pair(w, t0, call=CALL["MPI_Recv"], exit=recv_exit, slot=10, site=self.site(3), mask=workers,
               p2p=(0, self.task_bytes, 0, TAG_TASK, 1))
        b.message(np.zeros(shape, np.int64), np.broadcast_to(task[None, :], shape), send_entry, send_exit, recv_exit,
                  recv_exit, self.task_bytes, TAG_TASK, mask=workers)
        size = jitter(base, shape, 0.45)  # heavy-tailed task sizes: the same tasks in every run
        kinds = np.where((base.random(shape) < 0.5), kid("interpret"), kid("branchy_search"))
        ins = np.where(kinds == kid("interpret"), p.ins("interpret", 2.0e6 * size, main=self.main_kernel),
                       p.ins("branchy_search", 2.0e6 * size))
        w = b.work(kinds, ins)
        res_entry = recv_exit + w.dur
        res_exit = res_entry + net.call_ns + self.result_bytes / (0.8 * net.bw)
        b.pair(w, recv_exit, call=CALL["MPI_Send"], exit=res_exit, slot=20, site=self.site(4), mask=workers,
               p2p=(self.result_bytes, 0, 0, TAG_RESULT, 1))
        arrival = res_entry + net.p2p(task[None, :], np.zeros(P, np.int64)[None, :], self.result_bytes)
        # ---- master: results in arrival order (MPI_ANY_SOURCE)
        arrival_w = np.where(workers, arrival, np.inf)
        order = np.argsort(arrival_w, axis=1, kind="stable")[:, : P - 1]  # worker index of the k-th result
        rows = np.arange(B)
        proc_ins = p.ins("reduce_results", 3.0e5 * jitter(base, shape, 0.1))
        t = master_free
        recv_done = np.zeros(shape)  # per worker: exit of the master's Recv of its result
        prev = None
        for k in range(P - 1):
            wk = order[:, k]
            if prev is None:
                w = b.work(kid("poll"), 3000.0)
                slot = np.full(B, FIRST_WAIT)
            else:
                w = b.work(kid("reduce_results"), proc_ins[rows, prev][:, None])
                slot = PROCESS + prev
            entry = np.zeros(shape)
            entry[:, 0] = t + w.dur[:, 0]
            ready = np.zeros(shape)
            ready[:, 0] = arrival_w[rows, wk]
            first, done = b.poll_loop(
                entry,
                ready,
                call=CALL["MPI_Iprobe"],
                slot=(POLL + wk)[:, None],
                site=self.site(1),
                mask=is_master,
                poll_ins=POLL_INS,
            )
            start = np.zeros(shape)
            start[:, 0] = t
            b.pair(w, start, call=CALL["MPI_Iprobe"], exit=first, slot=slot[:, None], site=self.site(1), mask=is_master)
            w = b.work(kid("poll"), 1200.0)
            r_entry = done[:, 0] + w.dur[:, 0]
            r_exit = r_entry + net.call_ns + self.result_bytes / (0.8 * net.bw)
            start[:, 0], ex = done[:, 0], np.zeros(shape)
            ex[:, 0] = r_exit
            b.pair(
                w,
                start,
                call=CALL["MPI_Recv"],
                exit=ex,
                slot=(RECV + wk)[:, None],
                site=self.site(2),
                mask=is_master,
                p2p=(0, self.result_bytes, wk[:, None], TAG_RESULT, 1),
            )
            recv_done[rows, wk] = r_exit
            t, prev = r_exit, wk
        b.message(np.broadcast_to(task[None, :], shape), np.zeros(shape, np.int64), res_entry, res_exit, recv_done,
                  recv_done, self.result_bytes, TAG_RESULT, mask=workers)
        # ---- end of round: the master processes the last result, everyone meets in the Bcast
        w_last = b.work(kid("reduce_results"), proc_ins[rows, prev][:, None])
        w_wait = b.work(kid("poll"), 2000.0)
        w = w_last.where(is_master, w_wait)
        start = np.where(is_master, t[:, None], res_exit)
        start = b.housekeeping(start, slot=30, site=SITE_CONTROL)
        slot = np.where(is_master, (PROCESS + prev)[:, None], 40)
        exit = b.close(start + w.dur, net.bcast(8, P), last=True)
        b.pair(w, start, call=CALL["MPI_Bcast"], exit=exit, slot=slot, site=self.site(5), coll=(8, 8, 0, WORLD_COMM),
               world=True)
        b.advance(exit)

