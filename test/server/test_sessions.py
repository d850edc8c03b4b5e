"""SessionStore: history per session, isolation between owners (another owner's session is
indistinguishable from a missing one), one turn at a time, failed turns leave no trace,
TTL expiry and LRU eviction that never drops a busy session, thread safety, and the bounds:
bytes per session, a quota per tenant, and global caps that evict from the tenant holding
the most (so one tenant's traffic cannot evict another's sessions)."""

import threading

import pytest

from llaisys.server.state.sessions import SessionBusy, SessionStore, SessionStoreFull, SessionTooLarge, message_bytes


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
    with pytest.raises(ValueError, match="max_per_tenant"):
        SessionStore(max_per_tenant=0)
    with pytest.raises(ValueError, match="max_session_bytes"):
        SessionStore(max_session_bytes=0)
    with pytest.raises(ValueError, match="must not exceed"):
        SessionStore(max_session_bytes=10, max_total_bytes=5)


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


def turn(store, sid, owner, text="x", tenant=None):
    store.begin_turn(sid, owner, [user(text)], tenant=tenant)
    store.end_turn(sid, owner, assistant(text))


def test_a_session_is_capped_in_bytes():
    """A turn that would take the session past the cap is refused whole and changes nothing;
    the reply of an admitted turn is always kept."""
    one = message_bytes([user("a" * 100)])
    store = SessionStore(max_session_bytes=3 * one)
    store.begin_turn("s", "u", [user("a" * 100)])
    store.end_turn("s", "u", assistant("b" * 90))  # held: a little under 2 x one
    before = store.get("s", "u")
    with pytest.raises(SessionTooLarge, match=f"limit of {3 * one} bytes"):
        store.begin_turn("s", "u", [user("c" * 100), user("d" * 100)])
    assert store.get("s", "u") == before  # unchanged, and not left busy
    store.begin_turn("s", "u", [user("e")])
    store.end_turn("s", "u", assistant("f"))
    with pytest.raises(SessionTooLarge):  # a new session that could never fit is not created either
        store.begin_turn("big", "u", [user("g" * 400)])
    with pytest.raises(KeyError):
        store.get("big", "u")
    assert isinstance(SessionTooLarge("x"), ValueError)  # routes answer it 400


def test_byte_accounting_returns_to_zero():
    store = SessionStore()
    turn(store, "a", "u", "hello")
    store.begin_turn("a", "u", [user("more")])
    store.end_turn("a", "u", None)
    store.begin_turn("b", "u", [user("pending")])
    assert store.tenant_usage("u") == (2, store.total_bytes)
    assert store.total_bytes == message_bytes([user("hello")]) + message_bytes([assistant("hello")]) + \
        message_bytes([user("pending")])
    store.end_turn("b", "u", None)
    assert store.delete("a", "u")
    assert store.total_bytes == 0 and store.tenant_usage("u") == (0, 0)


def test_a_tenant_evicts_only_its_own_sessions_at_its_quota():
    clock = Clock()
    store = SessionStore(max_sessions=100, max_per_tenant=3, clock=clock)
    for i in range(3):
        turn(store, f"victim{i}", "victim")
        clock.t += 1
    for i in range(50):  # the noisy tenant's sessions churn within its own quota
        turn(store, f"noisy{i}", "noisy")
        clock.t += 1
    assert store.tenant_usage("noisy")[0] == 3
    assert [len(store.get(f"victim{i}", "victim")) for i in range(3)] == [2, 2, 2]
    assert store.get("noisy49", "noisy") and store.get("noisy47", "noisy")
    with pytest.raises(KeyError):
        store.get("noisy46", "noisy")  # its own least recently used went first


def test_owners_of_one_tenant_share_its_quota():
    """The quota is the tenant's (an API key): a new `user` value does not get a fresh one."""
    store = SessionStore(max_sessions=100, max_per_tenant=2)
    for i in range(5):
        turn(store, f"s{i}", f"key:k/user:{i}", tenant="key:k")
    assert store.tenant_usage("key:k")[0] == 2
    turn(store, "other", "key:j", tenant="key:j")
    assert len(store) == 3


def test_global_cap_evicts_from_the_tenant_holding_the_most():
    clock = Clock()
    store = SessionStore(max_sessions=6, max_per_tenant=4, clock=clock)
    turn(store, "a0", "a")  # a holds the oldest session of all
    for t in ("b", "c"):
        for i in range(2):
            clock.t += 1
            turn(store, f"{t}{i}", t)
    for i in range(10):  # d fills the last slot, then takes room only from tenants holding more than it
        clock.t += 1
        turn(store, f"d{i}", "d")
    usage = {t: store.tenant_usage(t)[0] for t in "abcd"}
    assert usage == {"a": 1, "b": 1, "c": 2, "d": 2}  # b gave one up (it held 2 to d's 1); then d churns its own
    assert store.get("a0", "a")  # the globally least recently used session survived
    clock.t += 1
    turn(store, "e0", "e")  # a newcomer takes from the largest holders (c or d), never from a or b
    assert store.tenant_usage("a")[0] == 1 and store.tenant_usage("b")[0] == 1 and len(store) == 6
    assert store.get("b1", "b")


def test_global_byte_cap_evicts_from_the_tenant_holding_the_most_bytes():
    one = message_bytes([user("x" * 1000)]) + message_bytes([assistant("x" * 1000)])
    store = SessionStore(max_sessions=100, max_session_bytes=4 * one, max_total_bytes=5 * one)
    turn(store, "small", "victim", "x" * 1000)
    for i in range(20):
        turn(store, f"big{i}", "hog", "x" * 1000)
    assert store.total_bytes <= 5 * one
    assert store.get("small", "victim")
    assert store.tenant_usage("hog")[0] == 4


def test_busy_sessions_block_their_tenant_only():
    store = SessionStore(max_sessions=10, max_per_tenant=2)
    store.begin_turn("h1", "hog", [user("x")])
    store.begin_turn("h2", "hog", [user("x")])
    with pytest.raises(SessionStoreFull, match="this caller"):
        store.begin_turn("h3", "hog", [user("x")])
    turn(store, "v", "victim")  # another tenant is not affected
    store.end_turn("h1", "hog", None)
    store.end_turn("h2", "hog", None)
    assert store.tenant_usage("hog") == (0, 0)
