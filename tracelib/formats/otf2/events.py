"""Buffering one location's raw OTF2 events: column arrays the ctypes callbacks append to while the C library
reads a chunk of events."""
from __future__ import annotations

from array import array

import numpy as np

from synthtrace.tracelib.formats.otf2.library import (
    _FP_BEGIN, _FP_COLL_END, _FP_END, _FP_IRECV_REQ, _FP_ISEND, _FP_METRIC,
                                              _FP_MRECV, _FP_NBC_END, _FP_REGION, _FP_SEND)

_UNDEFINED_U32 = 0xFFFFFFFF
_UNDEFINED_U64 = 0xFFFFFFFFFFFFFFFF
# region record kinds: Enter, Leave, ProgramBegin, ProgramEnd, ThreadTeamBegin, ThreadTeamEnd
_ENTER, _LEAVE, _BEGIN, _END, _TEAM_BEGIN, _TEAM_END = 0, 1, 2, 3, 4, 5
# point-to-point record kinds; a matched probe (MPI_Mprobe) names the sender, comm and tag of a later MpiMrecv
_SEND, _ISEND, _RECV, _IRECV, _IRECV_REQ, _PROBE, _MRECV = 0, 1, 2, 3, 4, 5, 6


class _EventBuffer:
    """Column arrays filled by ctypes callbacks while the C library reads one location's events."""

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self.r_kind, self.r_time, self.r_ref, self.r_pos = array("B"), array("Q"), array("I"), array("Q")
        self.m_time, self.m_ref, self.m_n, self.m_pos = array("Q"), array("I"), array("B"), array("Q")
        self.m_vals = array("Q")
        self.p_kind, self.p_time, self.p_peer, self.p_comm = array("B"), array("Q"), array("I"), array("I")
        self.p_tag, self.p_len, self.p_req, self.p_pos = array("I"), array("Q"), array("Q"), array("Q")
        self.c_time, self.c_comm, self.c_root, self.c_pos = array("Q"), array("I"), array("I"), array("Q")
        self.c_sent, self.c_recv = array("Q"), array("Q")

    def callbacks(self) -> dict[str, object]:
        """ctypes function pointers per OTF2 event type; keep them referenced while reading."""
        rk, rt, rr, rp = self.r_kind.append, self.r_time.append, self.r_ref.append, self.r_pos.append
        mt, mr, mn, mp, mv = (
            self.m_time.append,
            self.m_ref.append,
            self.m_n.append,
            self.m_pos.append,
            self.m_vals.extend,
        )
        pk, pt, pe, pc = self.p_kind.append, self.p_time.append, self.p_peer.append, self.p_comm.append
        pg, pl_, pq, pp = self.p_tag.append, self.p_len.append, self.p_req.append, self.p_pos.append
        ct, cc, cr, cp = self.c_time.append, self.c_comm.append, self.c_root.append, self.c_pos.append
        cs, cv = self.c_sent.append, self.c_recv.append

        def enter(_l, t, pos, _u, _a, region):
            rk(_ENTER); rt(t); rr(region); rp(pos)  # noqa: E702
            return 0

        def leave(_l, t, pos, _u, _a, region):
            rk(_LEAVE); rt(t); rr(region); rp(pos)  # noqa: E702
            return 0

        def team(kind: int):
            def cb(_l, t, pos, _u, _a, _team):
                rk(kind); rt(t); rr(0); rp(pos)  # noqa: E702
                return 0
            return cb

        def begin(_l, t, pos, _u, _a, _name, _n, _args):
            rk(_BEGIN); rt(t); rr(0); rp(pos)  # noqa: E702
            return 0

        def end(_l, t, pos, _u, _a, _status):
            rk(_END); rt(t); rr(0); rp(pos)  # noqa: E702
            return 0

        def metric(_l, t, pos, _u, _a, ref, n, _types, values):
            mt(t); mr(ref); mn(n); mp(pos); mv(values[:n])  # noqa: E702
            return 0

        def p2p(kind: int):
            def cb(_l, t, pos, _u, _a, peer, comm, tag, length, req=_UNDEFINED_U64):
                pk(kind); pt(t); pe(peer); pc(comm); pg(tag); pl_(length); pq(req); pp(pos)  # noqa: E702
                return 0
            return cb

        def irecv_request(_l, t, pos, _u, _a, req):
            pk(_IRECV_REQ); pt(t); pe(_UNDEFINED_U32); pc(_UNDEFINED_U32); pg(0); pl_(0); pq(req); pp(pos)  # noqa: E702
            return 0

        def probe(_l, t, pos, _u, _a, peer, comm, tag, message):
            pk(_PROBE); pt(t); pe(peer); pc(comm); pg(tag); pl_(0); pq(message); pp(pos)  # noqa: E702
            return 0

        def mrecv(_l, t, pos, _u, _a, message, length):
            pk(_MRECV); pt(t); pe(_UNDEFINED_U32); pc(_UNDEFINED_U32); pg(0); pl_(length); pq(message); pp(pos)  # noqa: E702
            return 0

        def coll_end(_l, t, pos, _u, _a, _op, comm, root, sent, recv, _req=0):  # blocking or non-blocking
            ct(t); cc(comm); cr(root); cs(sent); cv(recv); cp(pos)  # noqa: E702
            return 0

        return {"Enter": _FP_REGION(enter), "Leave": _FP_REGION(leave),
                "ThreadTeamBegin": _FP_REGION(team(_TEAM_BEGIN)), "ThreadTeamEnd": _FP_REGION(team(_TEAM_END)),
                "ProgramBegin": _FP_BEGIN(begin),
                "ProgramEnd": _FP_END(end), "Metric": _FP_METRIC(metric), "MpiSend": _FP_SEND(p2p(_SEND)),
                "MpiIsend": _FP_ISEND(p2p(_ISEND)), "MpiRecv": _FP_SEND(p2p(_RECV)),
                "MpiIrecv": _FP_ISEND(p2p(_IRECV)), "MpiIrecvRequest": _FP_IRECV_REQ(irecv_request),
                "MpiCollectiveEnd": _FP_COLL_END(coll_end), "NonBlockingCollectiveComplete": _FP_NBC_END(coll_end),
                "MpiProbe": _FP_SEND(probe), "MpiMrecv": _FP_MRECV(mrecv)}


def _np(a: array, dtype: type) -> np.ndarray:
    return np.frombuffer(a, dtype=dtype) if len(a) else np.zeros(0, dtype=dtype)


def _clear(buf: _EventBuffer) -> None:
    """Empty the buffer's arrays in place (the callbacks hold their bound ``append`` methods)."""
    for value in vars(buf).values():
        if isinstance(value, array):
            del value[:]
