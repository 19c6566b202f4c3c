"""Every token counted, against the real llama-server (rule:usage, rule:usage-charge, rule:daily-tokens,
rule:resumable-streams): llama.cpp's native /completion counted whatever the order of its answer's members
(n_probs puts completion_probabilities after timings) or charged by the rule when response_fields leaves
the counts out, and a key's DailyTokens= refusing with 429 on them; a resumable stream left after its
first token counted whole, once, for the key that started it, whether its client reads the rest again
from byte 0 or never, and its prompt counted as the engine said it (never `in:?`).

The server, the models and the engines are test_real.py's; without them this module skips, saying why."""

import hashlib
import http.client
import json
import os
import re

import test_real
from boxes import chat, gate_env
from conftest import post, wait_for
from test_access import make_key
from test_real import CHAT, FAST, engines, model_files  # noqa: F401 (fixtures)

pytestmark = test_real.pytestmark

COMPLETION = "/completion"


def keyed(tmp, conf, tokens):
    """[Access] with tier free capped at tokens a day, one key of it; (text, key, its usage.json name)"""
    keys = os.path.join(tmp, "keys")
    access = "[Access]\nKeysFile=%s\n[Tier]\nName=free\nDailyTokens=%s\n" % (keys, tokens)
    key = make_key(tmp, access + conf, "free")
    return FAST + access + conf, key, "k:" + hashlib.sha256(key.encode()).hexdigest()[:16]


def state_env(box, tmp):
    return dict(gate_env(box), STATE_DIRECTORY=os.path.join(tmp, "state"))


def day_tokens(tmp, name):
    """[in, cached, out] of the caller's day in usage.json (written at most 2 s behind), or None"""
    try:
        with open(os.path.join(tmp, "state", "usage.json")) as f:
            return json.load(f).get("tokens", {}).get(name)
    except (OSError, ValueError):
        return None


def send(g, path, body, key, rid):
    c = g.conn(timeout=120)
    r = post(c, path, body, headers={"Authorization": "Bearer " + key, "X-Request-Id": rid})
    raw = r.read()
    c.close()
    return r, raw


def line_tokens(line):
    """the access line's tokens=: (in, cached, out) as written ("~812", "?", "95")"""
    m = re.search(r" tokens=in:([~\d?]+),cached:([~\d?]+),out:([~\d?]+)", line)
    assert m, line
    return m.groups()


def charged(n_bytes):
    """rule:usage-charge: a prompt not said, at 4 bytes a token of the request's body, rounded up"""
    return -(-n_bytes // 4)


def test_native_completion_is_counted_whatever_its_members_order_and_capped(box, engines, make_gate, tmp):
    port, conf = engines
    text, key, name = keyed(tmp, conf, 100)
    g = make_gate(text, env=state_env(box, tmp))
    g.wait_log("host 3090 up")
    said = [0, 0, 0]

    # n_probs: the server puts completion_probabilities after timings; the line counts the timings all the same
    body = {"model": "3090-laguna-xs", "prompt": "hi", "n_predict": 8, "temperature": 0, "n_probs": 2}
    r, raw = send(g, COMPLETION, body, key, "t-nprobs")
    assert r.status == 200, raw
    order = [k for k, _ in json.loads(raw, object_pairs_hook=list)]
    assert order.index("completion_probabilities") > order.index("timings"), order  # the shape it really has
    t = json.loads(raw)["timings"]
    want = (str(t["prompt_n"] + t["cache_n"]), str(t["cache_n"]), str(t["predicted_n"]))
    line = g.access_line("t-nprobs")
    print(line)
    assert line_tokens(line) == want, (want, line)
    said = [said[0] + int(want[0]), said[1] + int(want[1]), said[2] + int(want[2])]

    # response_fields: the server sends the content alone, no count at all; charged by the rule, not as nothing
    body = {"model": "3090-laguna-xs", "prompt": "hi there", "n_predict": 32, "temperature": 0,
            "response_fields": ["content"]}
    sent = len(json.dumps(body))
    for i in range(2):
        r, raw = send(g, COMPLETION, body, key, "t-fields-%d" % i)
        assert r.status == 200, raw
        assert list(json.loads(raw)) == ["content"], raw  # the shape it really has
        line = g.access_line("t-fields-%d" % i)
        print(line)
        assert line_tokens(line) == ("~%d" % charged(sent), "?", "~32"), line
        said = [said[0] + charged(sent), said[1], said[2] + 32]
    # the key's day has them, and its next request is refused: its 100 tokens are spent
    wait_for(lambda: day_tokens(tmp, name) == said, 10, "usage.json to count %s" % said)
    assert said[0] - said[1] + said[2] >= 100, said
    r, raw = send(g, COMPLETION, body, key, "t-refused")
    assert r.status == 429 and "DailyTokens=100" in json.loads(raw)["error"]["message"], raw


def test_a_native_stream_with_counts_left_out_counts_its_prompt_and_pieces(box, engines, make_gate, tmp):
    """a native stream's every chunk says the prompt's count and the tokens so far (n_probs makes each end with
    its completion_probabilities); with response_fields its last chunk says none of it"""
    port, conf = engines
    text, key, name = keyed(tmp, conf, "infinity")
    g = make_gate(text, env=state_env(box, tmp))
    g.wait_log("host 3090 up")
    body = {"model": "3090-laguna-xs", "prompt": "hi", "n_predict": 6, "ignore_eos": True, "temperature": 0,
            "stream": True, "n_probs": 1, "response_fields": ["content"]}
    r, raw = send(g, COMPLETION, body, key, "t-native-stream")
    assert r.status == 200, raw
    lines = [l[6:] for l in raw.decode().splitlines() if l.startswith("data: ")]
    partial = json.loads(lines[0])
    # the shapes it really has: each partial chunk ends with its probabilities, the last says no count
    assert [k for k, _ in json.loads(lines[0], object_pairs_hook=list)][-1] == "completion_probabilities", lines[0]
    assert not {"timings", "tokens_evaluated", "tokens_predicted", "stop"} & set(json.loads(lines[-1])), lines[-1]
    line = g.access_line("t-native-stream")
    print(line)
    n_in, cached, out = line_tokens(line)
    assert n_in == str(partial["tokens_evaluated"]) and cached == "?", line
    assert int(out) >= 6, line  # each piece one token (the last chunk, which says nothing, one of them)


def read_events(raw):
    return [l[6:] for l in raw.decode().splitlines() if l.startswith("data: ") and l != "data: [DONE]"]


def test_a_resumable_stream_left_after_its_first_token_is_counted_whole_once(box, engines, make_gate, tmp):
    port, conf = engines
    text, key, name = keyed(tmp, conf, "infinity")
    g = make_gate(text, env=state_env(box, tmp))
    g.wait_log("host 3090 up")
    # fork's flint-xs, a prompt of some length and 1000 tokens: the stream outlasts its client's first line
    # (512 tokens took 0.35 s on CI's machine), and ends within the wait on a loaded one
    prompt = " ".join("word%d" % i for i in range(300))
    body = dict(chat("3090-flint-xs", prompt, True), max_tokens=1000, ignore_eos=True, temperature=0,
                stream_options={"include_usage": True})
    c = http.client.HTTPConnection("127.0.0.1", g.port, timeout=120)
    c.request("POST", CHAT, json.dumps(body), {"Content-Type": "application/json", "Authorization": "Bearer " + key,
                                               "X-Conversation-Id": "t1", "X-Request-Id": "t-left"})
    r = c.getresponse()
    assert r.status == 200
    while True:  # up to its first token (the first chunk names the role)
        line = r.readline()
        assert line, "the stream ended before its first token"
        if line.startswith(b"data: {") and b'"content":"' in line:
            break
    r.close()
    c.close()

    # the request's own line: 499, what had arrived, its prompt charged by the rule (never in:?), and it counts
    # nothing itself
    left = g.access_line("t-left")
    print(left)
    assert " status=499 " in left and " cut=client " in left, left
    n_in, cached, out = line_tokens(left)
    # (modelgate may have passed on more pieces than the client read before it saw the client gone)
    assert n_in == "~%d" % charged(len(json.dumps(body))) and cached == "?" and out.isdigit(), left
    assert re.search(r" tokens=\S+\(cut\) ", left), left
    # the drain reads it to its end and counts it whole, for the key that started it
    ended = g.wait_log("host 3090: conversation t1: its stream ended (complete)", timeout=300)
    print(ended)
    m = re.search(r"after its client left, tokens=in:(\d+),cached:(\d+),out:(\d+) key=free:([0-9a-f]{8})", ended)
    assert m and name.startswith("k:" + m.group(4)), ended
    drained = [int(m.group(1)), int(m.group(2)), int(m.group(3))]
    wait_for(lambda: day_tokens(tmp, name) == drained, 10, "usage.json to count %s" % drained)

    # the whole stream again, from byte 0: its usage is what the drain counted, and the resume adds nothing
    c = http.client.HTTPConnection("127.0.0.1", g.port, timeout=120)
    c.request("GET", "/v1/stream?conv_id=t1&from=0", headers={"Authorization": "Bearer " + key,
                                                               "X-Request-Id": "t-resume"})
    r = c.getresponse()
    raw = r.read()
    c.close()
    assert r.status == 200, raw
    usage = [json.loads(e)["usage"] for e in read_events(raw) if '"usage"' in e][-1]
    said = [usage["prompt_tokens"], usage["prompt_tokens_details"]["cached_tokens"], usage["completion_tokens"]]
    assert drained == said and said[2] == 1000 and said[0] > 300, (drained, usage)
    line = g.access_line("t-resume")
    assert " tokens=" not in line, line
    g.log_mark("after-resume")
    assert day_tokens(tmp, name) == said
