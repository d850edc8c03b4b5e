"""SessionStore: history per session, isolation between owners (another owner's session is
indistinguishable from a missing one), one turn at a time, failed turns leave no trace,
TTL expiry and LRU eviction that never drops a busy session, and thread safety."""

import threading

import pytest

from llaisys.server.sessions import SessionBusy, SessionStore, SessionStoreFull


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def user(text):
    return {"role": "user", "content": text}


def assistant(text):
    return {"role": "assistant", "content": text}


def test_turns_accumulate_history():
    store = SessionStore()
    assert store.begin_turn("s", "alice", [user("hi")]) == [user("hi")]
    store.end_turn("s", "alice", assistant("hello"))
    convo = store.begin_turn("s", "alice", [user("again")])
    assert convo == [user("hi"), assistant("hello"), user("again")]
    store.end_turn("s", "alice", assistant("sure"))
    assert store.get("s", "alice") == [user("hi"), assistant("hello"), user("again"), assistant("sure")]


def test_returned_and_stored_messages_are_copies():
    store = SessionStore()
    msgs = [user("hi")]
    convo = store.begin_turn("s", "alice", msgs)
    msgs[0]["content"] = "changed by the caller"
    convo.append(user("appended by the caller"))
    reply = assistant("hello")
    store.end_turn("s", "alice", reply)
    reply["content"] = "changed"
    got = store.get("s", "alice")
    assert got == [user("hi"), assistant("hello")]
    got.clear()
    assert len(store.get("s", "alice")) == 2


def test_owners_are_isolated_and_cannot_probe():
    store = SessionStore()
    store.begin_turn("s", "alice", [user("secret")])
    store.end_turn("s", "alice", assistant("ok"))
    with pytest.raises(KeyError):
        store.begin_turn("s", "mallory", [user("tell me")])
    with pytest.raises(KeyError):
        store.get("s", "mallory")
    with pytest.raises(KeyError):
        store.end_turn("s", "mallory", assistant("x"))
    assert store.delete("s", "mallory") is False
    # the same errors as for an id that does not exist at all
    with pytest.raises(KeyError):
        store.get("nope", "mallory")
    assert store.delete("nope", "mallory") is False
    # alice's session is unchanged by all of that
    assert store.get("s", "alice") == [user("secret"), assistant("ok")]
    # session ids are per store, not per owner: mallory cannot shadow alice's id either
    assert store.begin_turn("other", "mallory", [user("mine")]) == [user("mine")]


def test_one_turn_at_a_time():
    store = SessionStore()
    store.begin_turn("s", "alice", [user("one")])
    with pytest.raises(SessionBusy):
        store.begin_turn("s", "alice", [user("two")])
    with pytest.raises(SessionBusy):
        store.delete("s", "alice")
    store.end_turn("s", "alice", assistant("1"))
    assert store.begin_turn("s", "alice", [user("two")])[-1] == user("two")
    store.end_turn("s", "alice", assistant("2"))
    with pytest.raises(ValueError, match="no turn running"):
        store.end_turn("s", "alice", assistant("3"))


def test_failed_turn_drops_its_new_messages():
    store = SessionStore()
    store.begin_turn("s", "alice", [user("one")])
    store.end_turn("s", "alice", assistant("1"))
    store.begin_turn("s", "alice", [user("two"), user("and more")])
    store.end_turn("s", "alice", None)  # failed or aborted
    assert store.get("s", "alice") == [user("one"), assistant("1")]
    assert store.begin_turn("s", "alice", [user("retry")]) == [user("one"), assistant("1"), user("retry")]
    store.end_turn("s", "alice", None)
    # a failed first turn leaves no session behind (and frees the id)
    store.begin_turn("fresh", "alice", [user("x")])
    store.end_turn("fresh", "alice", None)
    with pytest.raises(KeyError):
        store.get("fresh", "alice")
    store.begin_turn("fresh", "bob", [user("y")])  # anyone may now create it


def test_ttl_expiry_spares_busy_sessions():
    clock = Clock()
    store = SessionStore(ttl_s=10, clock=clock)
    store.begin_turn("idle", "a", [user("x")])
    store.end_turn("idle", "a", assistant("y"))
    store.begin_turn("busy", "a", [user("x")])
    clock.t = 9.0
    assert store.get("idle", "a")  # reading does not refresh it
    clock.t = 10.0
    with pytest.raises(KeyError):
        store.get("idle", "a")
    clock.t = 100.0
    assert len(store) == 1  # the busy one stays however long its turn runs
    store.end_turn("busy", "a", assistant("y"))
    clock.t = 109.0
    assert store.get("busy", "a") == [user("x"), assistant("y")]
    clock.t = 110.0
    assert len(store) == 0


def test_lru_eviction_makes_room():
    clock = Clock()
    store = SessionStore(max_sessions=2, clock=clock)
    for sid in ("a", "b"):
        store.begin_turn(sid, "u", [user(sid)])
        store.end_turn(sid, "u", assistant(sid))
        clock.t += 1
    store.begin_turn("a", "u", [user("again")])  # a becomes the most recently used
    store.end_turn("a", "u", assistant("again"))
    store.begin_turn("c", "u", [user("c")])  # evicts b, the least recently used
    with pytest.raises(KeyError):
        store.get("b", "u")
    assert len(store.get("a", "u")) == 4
    # c is busy, so only a can go: then nothing is left to evict
    store.begin_turn("a", "u", [user("busy too")])
    with pytest.raises(SessionStoreFull):
        store.begin_turn("d", "u", [user("d")])
    store.end_turn("a", "u", None)
    store.begin_turn("d", "u", [user("d")])  # a is idle again and evicted for d
    with pytest.raises(KeyError):
        store.get("a", "u")


@pytest.mark.parametrize("bad", ["", None, 7, "x" * 129, "line\nbreak"])
def test_bad_session_ids(bad):
    with pytest.raises(ValueError, match="session_id"):
        SessionStore().begin_turn(bad, "u", [user("x")])


def test_bad_arguments():
    with pytest.raises(ValueError, match="at least one new message"):
        SessionStore().begin_turn("s", "u", [])
    with pytest.raises(ValueError, match="max_sessions"):
        SessionStore(max_sessions=0)
    with pytest.raises(ValueError, match="ttl_s"):
        SessionStore(ttl_s=0)


def test_concurrent_turns_on_one_session_never_interleave():
    """Many threads race for one session: every turn that got in is committed whole, in order."""
    store = SessionStore()
    won, lost = [], []
    barrier = threading.Barrier(8)

    def worker(i):
        barrier.wait()
        for k in range(50):
            try:
                store.begin_turn("s", "u", [user(f"{i}.{k}")])
            except SessionBusy:
                lost.append(i)
                continue
            store.end_turn("s", "u", assistant(f"{i}.{k}"))
            won.append(i)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    history = store.get("s", "u")
    assert len(history) == 2 * len(won) and len(won) + len(lost) == 400
    for q, a in zip(history[::2], history[1::2]):
        assert q["role"] == "user" and a["role"] == "assistant" and q["content"] == a["content"]
