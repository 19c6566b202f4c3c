"""The availability fallback and the time budgets (rule:fallback-availability, rule:fallback-request,
rule:answer-budget): engines in a boxed user manager, a second double
as the "cloud". It answers only when the engine cannot — before any of the engine's answer reached the
client — never for errors that would fail the same anywhere, once, and with its own key."""

import json
import os
import re
import subprocess
import time
import types

import pytest

import conftest
from boxes import box_skip_reason, chat, engine_unit, gate_env, local_host
from conftest import double_requests, free_port, metric_samples, post, read_response, read_sse, wait_for

pytestmark = pytest.mark.skipif(box_skip_reason() is not None, reason=str(box_skip_reason()))

CHAT = "/v1/chat/completions"
KEY = "sk-cloud-test-0123456789"


@pytest.fixture
def cloud(make_double, tmp):
    d = make_double("--models", "cloud-model", "--loaded", "cloud-model", "--name", "cloud", "--no-knobs")
    keyfile = os.path.join(tmp, "cloud.key")
    with open(keyfile, "w") as f:
        f.write(KEY + "\n")
    d.keyfile = keyfile
    return d


def gate_with_fallback(box, make_gate, cloud, engine_extra="", proxy="", double_args="", fallback_extra="", unit_extra=""):
    port = free_port()
    box.add_unit("llama-main.service", engine_unit("main", port, "laguna-xs", double_args=double_args,
                                                   extra_service=unit_extra))
    box.reload()
    conf = "[Proxy]\nHoldDownSec=1s\nKeepaliveAfterSec=1s\nKeepaliveIntervalSec=1s\n%s" % proxy
    conf += local_host("h", port)
    conf += "[Engine]\nHost=h\nName=main\nUnit=llama-main.service\nModels=laguna-*\nStartTimeoutSec=20s\n"
    conf += "Fallback=cloud\n" + engine_extra
    conf += "[Fallback]\nName=cloud\nURL=%s\nModel=cloud-model\nKeyFile=%s\n%s" % (cloud.url, cloud.keyfile,
                                                                                   fallback_extra)
    g = make_gate(conf, env=gate_env(box))
    g.wait_log("host h up")
    g.engine_port = port
    return g


def ask(g, content="hi", stream=False, model="h-laguna-xs", headers=None):
    a = conftest.ask(g, model, content, stream, headers=headers)
    return a.response, a.text() if stream else a.body


def cloud_requests(cloud):
    return [r for r in cloud.requests() if r["path"] == CHAT]


def assert_from_cloud(r, body, cloud, stream=False):
    assert r.status == 200, body
    assert r.getheader("X-Modelgate-Served-By") in ("fallback/cloud", None)  # None: after an early 200
    if stream:
        assert "data: [DONE]" in body, body
    else:
        assert json.loads(body)["model"] == "cloud-model", body
    (req,) = cloud_requests(cloud)[-1:]
    sent = json.loads(req["body"])
    assert sent["model"] == "cloud-model"  # the client's model is renamed to the fallback's
    headers = {k.lower(): v for k, v in req["headers"]}
    assert headers["authorization"] == "Bearer " + KEY
    assert "x-api-key" not in headers


def test_engine_that_cannot_start_falls_back_with_the_server_key(box, make_gate, cloud):
    g = gate_with_fallback(box, make_gate, cloud, unit_extra="ExecStartPre=/bin/false\n")
    r, body = ask(g, headers={"Authorization": "Bearer client-secret"})
    assert_from_cloud(r, body, cloud)
    # the client's own credential never travels, the server's key does
    assert "client-secret" not in json.dumps(cloud_requests(cloud))
    line = g.wait_log("POST /v1/chat/completions")
    assert "via=fallback/cloud" in line, line
    # rule:usage: the cloud's answer is counted, and said to be the cloud's; no engine of ours answered
    assert re.search(r" tokens=in:\d+,cached:0,out:5\(cloud\) prefill=", line) and " engine=" not in line, line
    g.wait_log("goes to fallback cloud: engine 'main' of host 'h' (unit llama-main.service) failed to start")
    samples = metric_samples(g)
    assert samples[("modelgate_fallbacks_total", (("engine", "main"), ("fallback", "cloud"), ("host", "h")))] == 1


def test_the_responses_api_goes_to_the_fallbacks_responses_path_as_it_is(box, make_gate, cloud):
    """rule:responses-api: /v1/responses is forwarded untranslated, to a fallback that speaks it"""
    g = gate_with_fallback(box, make_gate, cloud, unit_extra="ExecStartPre=/bin/false\n")
    for stream in (False, True):
        r = post(g.conn(timeout=60), "/v1/responses", {"model": "h-laguna-xs", "input": "hi", "stream": stream})
        body = r.read().decode()
        assert r.status == 200, body
        if stream:
            assert "event: response.completed" in body, body
        else:
            assert json.loads(body)["object"] == "response" and json.loads(body)["model"] == "cloud-model", body
        (req,) = [q for q in cloud.requests() if q["path"] == "/v1/responses"][-1:]
        sent = json.loads(req["body"])
        assert sent == {"model": "cloud-model", "input": "hi", "stream": stream}, sent
        assert dict((k.lower(), v) for k, v in req["headers"])["authorization"] == "Bearer " + KEY
    for n in (1, 2):  # rule:usage: "hi" is one token to the double, which writes 5
        line = g.wait_log("POST /v1/responses", count=n)
        assert "via=fallback/cloud" in line and " tokens=in:1,cached:0,out:5(cloud) " in line, line


def test_reset_before_the_answer_and_404_503_fall_back(box, make_gate, cloud):
    g = gate_with_fallback(box, make_gate, cloud)
    r, body = ask(g, "warm up")
    assert r.status == 200 and r.getheader("X-Modelgate-Served-By") == "h/main"
    for content in ("[[status:503]]", "[[status:404]]"):
        r, body = ask(g, content)
        assert_from_cloud(r, body, cloud)
    # the engine process dies on this one: the connection resets before any answer
    r, body = ask(g, "[[crash]]", stream=True)
    assert_from_cloud(r, body, cloud, stream=True)


@pytest.mark.parametrize("status", [400, 401, 403, 413, 422, 429])
def test_errors_that_would_fail_anywhere_do_not_fall_back(box, make_gate, cloud, status):
    g = gate_with_fallback(box, make_gate, cloud)
    r, body = ask(g, "[[status:%d]]" % status)
    assert r.status == status, body
    assert r.getheader("X-Modelgate-Served-By") == "h/main"
    assert cloud_requests(cloud) == []


def test_a_stream_cut_after_its_first_byte_is_not_retried(box, make_gate, cloud):
    g = gate_with_fallback(box, make_gate, cloud)
    r, body = ask(g, "[[tokens:6]] [[cut:3]]", stream=True)
    assert r.status == 200
    assert "tok0" in body and "stopped the stream before it ended" in body, body
    assert cloud_requests(cloud) == []
    # rule:usage: the three tokens that came are counted, and said to be all that came; rule:usage-charge: the
    # prompt the stream never said is charged at 4 bytes a token of the request's body
    line = g.wait_log("cut=host")
    sent = len(json.dumps(chat("h-laguna-xs", "[[tokens:6]] [[cut:3]]", stream=True)))
    assert " engine=main " in line and " tokens=in:~%d,cached:?,out:3(cut) " % -(-sent // 4) in line, line


def test_the_fallback_failing_is_the_clients_error_not_chained(box, make_gate, make_double, tmp):
    # a "cloud" that is still loading: 503 to everything
    bad = make_double("--models", "cloud-model", "--startup-delay", "3600", "--no-knobs")
    bad.keyfile = os.path.join(tmp, "bad.key")
    open(bad.keyfile, "w").write(KEY)
    g = gate_with_fallback(box, make_gate, bad)
    r, body = ask(g, "[[status:503]]")
    assert r.status == 503 and b"Loading model" in body, body
    assert r.getheader("X-Modelgate-Served-By") == "fallback/cloud"
    assert len(cloud_requests(bad)) == 1


def test_first_token_budget_cancels_the_engine_request_and_the_fallback_answers(box, make_gate, cloud):
    g = gate_with_fallback(box, make_gate, cloud, engine_extra="FirstTokenBudgetSec=1s\n")
    start = time.monotonic()
    r, body = ask(g, "[[hang]]", stream=True)
    took = time.monotonic() - start
    assert_from_cloud(r, body, cloud, stream=True)
    assert r.getheader("X-Modelgate-Served-By") == "fallback/cloud"
    assert 0.9 < took < 5, took
    # the engine saw its connection closed: the GPU stops working on it
    wait_for(lambda: any(q.get("disconnected") for q in double_requests(g.engine_port) if "[[hang]]" in q.get("body", "")),
             what="the engine to see the disconnect")
    g.wait_log("no first token not within 1s (FirstTokenBudgetSec=)")


def test_request_budget_without_fallback_is_504(box, make_gate, cloud):
    port = free_port()
    box.add_unit("llama-main.service", engine_unit("main", port, "laguna-xs"))
    box.reload()
    conf = local_host("h", port) + "[Engine]\nHost=h\nName=main\nUnit=llama-main.service\nModels=laguna-*\n" \
        "RequestBudgetSec=1s\n"
    g = make_gate(conf, env=gate_env(box))
    g.wait_log("host h up")
    r, body = ask(g, "[[hang]]")
    assert r.status == 504, body
    assert "no whole answer not within 1s (RequestBudgetSec=); the request was cancelled" in \
        json.loads(body)["error"]["message"]


def test_wait_budget_after_an_early_200_falls_back_into_the_same_stream(box, make_gate, cloud):
    g = gate_with_fallback(box, make_gate, cloud, proxy="WaitBudgetSec=3s\n", double_args="--startup-delay 30")
    start = time.monotonic()
    r, body = ask(g, "hi", stream=True)
    assert r.status == 200
    assert ": waiting for engine main on h" in body, body  # keepalives first ...
    assert body.rstrip().endswith("data: [DONE]"), body     # ... then the cloud's stream in the same response
    assert "error" not in body
    assert 2.5 < time.monotonic() - start < 10
    assert "via=fallback/cloud" in g.wait_log("POST /v1/chat/completions")

    # rule:keepalive-events: on /v1/messages modelgate began the message; the cloud's is spliced into it
    r = post(g.conn(timeout=60), "/v1/messages", {"model": "h-laguna-xs", "stream": True, "max_tokens": 16,
                                                   "messages": [{"role": "user", "content": "hi"}]})
    assert r.status == 200
    events = [l[len("event: "):].strip() for _, l in read_sse(r) if l.startswith("event: ")]
    assert events.count("message_start") == 1 and events[0] == "message_start", events
    assert "content_block_delta" in events and events[-1] == "message_stop", events
    assert "via=fallback/cloud" in g.wait_log("POST /v1/messages")


def test_busy_gpu_falls_back_unless_on_busy_is_no(box, make_gate, cloud):
    box.add_unit("gpu-bench.service", "[Service]\nExecStart=/bin/sleep 600\n")
    box.reload()
    box.systemctl("start", "gpu-bench.service")
    for on_busy, expect in (("yes", 200), ("no", 423)):
        port = free_port()
        box.add_unit("llama-main.service", engine_unit("main", port, "laguna-xs"))
        box.reload()
        conf = local_host("h", port, "BusyUnits=gpu-bench.service\n")
        conf += "[Engine]\nHost=h\nName=main\nUnit=llama-main.service\nModels=laguna-*\nFallback=cloud\n"
        conf += "[Fallback]\nName=cloud\nURL=%s\nModel=cloud-model\nOnBusy=%s\n" % (cloud.url, on_busy)
        g = make_gate(conf, env=gate_env(box))
        g.wait_log("host h up")
        r, body = ask(g)
        assert r.status == expect, body
        g.stop()


def test_clients_cannot_name_the_fallback_and_the_list_does_not_show_it(box, make_gate, cloud):
    g = gate_with_fallback(box, make_gate, cloud)
    for model in ("cloud", "cloud-model", "h-cloud-model"):
        r, body = ask(g, model=model)
        assert r.status == 404, (model, body)
    c = g.conn()
    c.request("GET", "/v1/models")
    ids = [m["id"] for m in json.loads(c.getresponse().read())["data"]]
    assert not any("cloud" in i for i in ids), ids
    assert cloud_requests(cloud) == []


def test_host_down_falls_back(make_gate, cloud):
    # a host whose bus cannot be reached: down, and its engine's requests go to the fallback at once
    conf = "[Host]\nName=gone\nURL=http://127.0.0.1:%d\nBus=ssh:root@127.0.0.1:%d\nSSHCommand=ssh -F /dev/null\n" \
        "[Engine]\nHost=gone\nName=main\nUnit=llama-main.service\nModels=*\nFallback=cloud\n" \
        "[Fallback]\nName=cloud\nURL=%s\nModel=cloud-model\nKeyFile=%s\n" % (free_port(), free_port(), cloud.url,
                                                                          cloud.keyfile)
    g = make_gate(conf)
    g.wait_log("host gone down")
    start = time.monotonic()
    r, body = ask(g, model="gone-anything", headers={"X-Request-Id": "fb-gone-1"})
    assert_from_cloud(r, body, cloud)
    assert time.monotonic() - start < 5
    # the line carries the request's id, as every line about a request does (rule:request-id)
    assert g.wait_log("goes to fallback cloud: host 'gone' is down").endswith(" id=fb-gone-1")


def make_ca_and_server_cert(tmp):
    """a CA of the test's own and a certificate for 127.0.0.1 signed by it"""
    d = os.path.join(tmp, "tls")
    os.makedirs(d)
    run = lambda *a: subprocess.run(list(a), cwd=d, check=True, capture_output=True)
    run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
        "-days", "2", "-subj", "/CN=modelgate test CA")
    run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "srv.key", "-out", "srv.csr",
        "-subj", "/CN=127.0.0.1")
    with open(os.path.join(d, "ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\n")
    run("openssl", "x509", "-req", "-in", "srv.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "srv.pem", "-days", "2", "-extfile", "ext")
    return os.path.join(d, "ca.pem"), os.path.join(d, "srv.pem"), os.path.join(d, "srv.key")


def tls_requests(cloud, ca):
    import http.client
    import ssl
    c = http.client.HTTPSConnection("127.0.0.1", cloud.port, timeout=10, context=ssl.create_default_context(cafile=ca))
    c.request("GET", "/_double/requests")
    return [q for q in json.loads(c.getresponse().read()) if q["path"] == CHAT]


def test_https_fallback_verifies_its_certificate(box, make_gate, make_double, tmp):
    ca, cert, key = make_ca_and_server_cert(tmp)
    cloud = make_double("--models", "cloud-model", "--loaded", "cloud-model", "--no-knobs",
                        "--tls-cert", cert, "--tls-key", key)
    cloud.url = "https://127.0.0.1:%d" % cloud.port
    cloud.keyfile = os.path.join(tmp, "k")
    open(cloud.keyfile, "w").write(KEY)
    port = free_port()
    box.add_unit("llama-main.service", engine_unit("main", port, "laguna-xs", extra_service="ExecStartPre=/bin/false\n"))
    box.reload()
    conf = local_host("h", port) + "[Engine]\nHost=h\nName=main\nUnit=llama-main.service\nModels=laguna-*\n" \
        "Fallback=cloud\n[Fallback]\nName=cloud\nURL=%s\nModel=cloud-model\nKeyFile=%s\n" % (cloud.url, cloud.keyfile)
    # trusted through SSL_CERT_FILE (as a system CA would be): the answer comes over TLS
    g = make_gate(conf, env=dict(gate_env(box), SSL_CERT_FILE=ca))
    g.wait_log("host h up")
    r, body = ask(g, "over tls", stream=True)
    assert r.status == 200 and r.getheader("X-Modelgate-Served-By") == "fallback/cloud", body
    assert body.rstrip().endswith("data: [DONE]"), body
    (req,) = tls_requests(cloud, ca)
    assert dict((k.lower(), v) for k, v in req["headers"])["authorization"] == "Bearer " + KEY
    # the same fallback with the system's CAs only: its certificate is refused, nothing is sent
    g2 = make_gate(conf, env=gate_env(box))
    g2.wait_log("host h up")
    r, body = ask(g2, "not over an untrusted tls")
    assert r.status == 502, body
    assert b"its TLS certificate is not trusted" in body, body
    assert len(tls_requests(cloud, ca)) == 1


def test_the_fallback_key_serves_inference_only(box, make_gate, cloud):
    """The reproducers of the review: the engine answers 404 to a path it does not know, which used to send
    the client's method, path and query to the cloud with the operator's key."""
    g = gate_with_fallback(box, make_gate, cloud)
    cloud.clear()
    body = json.dumps({"model": "h-laguna-xs"}).encode()
    for method, target in [("GET", "/v1/files?purpose=x"), ("DELETE", "/../../organization/projects/p1"),
                           ("POST", "/v1/files"), ("POST", "/v1/../v1/chat/completions"),
                           ("POST", "/v1/chat/completions/../../organization/projects")]:
        s = g.sock()
        s.settimeout(60)
        s.sendall(b"%s %s HTTP/1.1\r\nHost: g\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                  % (method.encode(), target.encode(), len(body)) + body)
        status, headers, reply = read_response(s.makefile("rb"))
        s.close()
        # the engine's own answer (llama.cpp's 404), never the cloud's
        assert headers.get("x-modelgate-served-by") == "h/main", (target, status, headers, reply)
    assert cloud.requests() == []
    # inference does go there: on modelgate's own path, without the client's query or account headers
    c = g.conn(timeout=60)
    r = post(c, CHAT + "?api-version=x&model=h-laguna-xs", chat("h-laguna-xs", "[[status:503]]"),
             headers={"OpenAI-Organization": "org-client", "OpenAI-Project": "p-client", "anthropic-beta": "x",
                      "Authorization": "Bearer client-secret"})
    assert_from_cloud(r, r.read(), cloud)
    (req,) = cloud.requests()
    assert req["method"] == "POST" and req["path"] == CHAT
    names = {k.lower() for k, _ in req["headers"]}
    assert not names & {"openai-organization", "openai-project", "anthropic-beta", "x-api-key"}, names


def test_an_https_fallback_under_a_base_path_gets_inference_only(box, make_gate, make_double, tmp):
    """The review's reproducers as it ran them: an https cloud under a base path, trusted through
    SSL_CERT_FILE, and an engine that answers 404 to a path it does not know (as llama.cpp does). Those
    requests get the engine's answer and the cloud nothing; inference goes to modelgate's own path under the
    base, with the operator's key and none of the client's query, credentials or account headers."""
    ca, cert, key = make_ca_and_server_cert(tmp)
    cloud = make_double("--models", "cloud-model", "--loaded", "cloud-model", "--no-knobs", "--tls-cert", cert,
                        "--tls-key", key, "--base-path", "/v1base")
    keyfile = os.path.join(tmp, "k")
    open(keyfile, "w").write(KEY)
    port = free_port()
    box.add_unit("llama-main.service", engine_unit("main", port, "foo"))
    box.reload()
    conf = local_host("h", port) + "[Engine]\nHost=h\nName=main\nUnit=llama-main.service\nModels=foo\n" \
        "StartTimeoutSec=20s\nFallback=cloud\n[Fallback]\nName=cloud\nURL=https://127.0.0.1:%d/v1base\n" \
        "Model=cloud-model\nKeyFile=%s\n" % (cloud.port, keyfile)
    g = make_gate(conf, env=dict(gate_env(box), SSL_CERT_FILE=ca))
    g.wait_log("host h up")

    def cloud_got():
        import http.client
        import ssl
        c = http.client.HTTPSConnection("127.0.0.1", cloud.port, timeout=10,
                                        context=ssl.create_default_context(cafile=ca))
        c.request("GET", "/_double/requests")
        return [(q["method"], q["path"], q) for q in json.loads(c.getresponse().read())
                if q["path"] != "/_double/requests"]

    body = b'{"model":"h-foo"}'
    for method, target in [("GET", "/v1/files?purpose=x"), ("DELETE", "/../../organization/projects/p1")]:
        s = g.sock()
        s.settimeout(60)
        s.sendall(b"%s %s HTTP/1.1\r\nHost: g\r\nContent-Type: application/json\r\nOpenAI-Organization: org-c\r\n"
                  b"Content-Length: %d\r\n\r\n" % (method.encode(), target.encode(), len(body)) + body)
        status, headers, reply = read_response(s.makefile("rb"))
        s.close()
        # the engine's own 404, not the cloud's answer
        assert status == 404 and headers.get("x-modelgate-served-by") == "h/main", (target, status, headers, reply)
        assert json.loads(reply)["error"]["message"] == "File Not Found", reply
        assert (method, target) in [(q["method"], q["path"]) for q in double_requests(port)]
    assert cloud_got() == []

    # inference that falls back: modelgate's path under the base, only what the API needs of the client
    account = {"OpenAI-Organization": "org-client", "OpenAI-Project": "p-client", "anthropic-beta": "tools-x"}
    c = g.conn(timeout=60)
    r = post(c, CHAT + "?api-version=x", chat("h-foo", "[[status:503]]"),
             headers=dict(account, Authorization="Bearer client-secret", Accept="application/json"))
    reply = r.read()
    assert r.status == 200 and r.getheader("X-Modelgate-Served-By") == "fallback/cloud", reply
    assert json.loads(reply)["model"] == "cloud-model"
    r = post(c, "/v1/messages", {"model": "h-foo", "max_tokens": 8, "messages": [{"role": "user",
                                                                              "content": "[[status:503]]"}]},
             headers=dict(account, Accept="application/json",
                          **{"x-api-key": "client-secret", "anthropic-version": "2023-06-01"}))
    reply = r.read()
    assert r.status == 200 and r.getheader("X-Modelgate-Served-By") == "fallback/cloud", reply
    assert json.loads(reply)["model"] == "cloud-model"
    got = cloud_got()
    assert [(m, p) for m, p, _ in got] == [("POST", "/v1base" + CHAT), ("POST", "/v1base/v1/messages")], got
    chat_headers, messages_headers = ({k.lower(): v for k, v in q["headers"]} for _, _, q in got)
    assert set(chat_headers) == {"host", "user-agent", "content-type", "accept", "authorization",
                                 "content-length"}, chat_headers
    assert chat_headers["authorization"] == "Bearer " + KEY and chat_headers["accept"] == "application/json"
    assert set(messages_headers) == {"host", "user-agent", "content-type", "accept", "anthropic-version",
                                     "x-api-key", "content-length"}, messages_headers
    assert messages_headers["x-api-key"] == KEY and messages_headers["anthropic-version"] == "2023-06-01"
    assert "client-secret" not in json.dumps(got)


# Claude Code's system prompt, as it sends it (2.1.197): its attribution line first, then the rest
ATTRIBUTION = '{"type":"text","text":"x-anthropic-billing-header: cc_version=2.1.197.0df; cc_entrypoint=sdk-cli;"}'
CLAUDE_BODY = ('{"model":"h-laguna-xs","messages":[{"role":"user","content":"hi"}],"system":[' + ATTRIBUTION +
               ',{"type":"text","text":"You are a Claude agent.","cache_control":{"type":"ephemeral"}}],'
               '"max_tokens":16,"stream":false}')


def test_claude_codes_attribution_line_never_reaches_a_host_but_reaches_the_fallback(box, make_gate, cloud):
    """rule:attribution-line: the block is cut out of the request for the engine, every other byte as the
    client sent it (Content-Length recomputed); the fallback gets the client's request as it was"""
    g = gate_with_fallback(box, make_gate, cloud)
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        r = post(g.conn(timeout=60), path, CLAUDE_BODY.encode(), {"anthropic-version": "2023-06-01"})
        r.read()
        (req,) = [q for q in double_requests(g.engine_port) if q["path"] == path][-1:]
        want = CLAUDE_BODY.replace(ATTRIBUTION + ",", "").replace('"h-laguna-xs"', '"laguna-xs"')
        assert req["body"] == want, req["body"]
        assert dict((k.lower(), v) for k, v in req["headers"])["content-length"] == str(len(want))
    # the same words anywhere else (a user quoting it) are left alone
    quoted = CLAUDE_BODY.replace('"content":"hi"', '"content":' + json.dumps(ATTRIBUTION))
    quoted = quoted.replace(ATTRIBUTION + ",", "")
    post(g.conn(timeout=60), "/v1/messages", quoted.encode()).read()
    (req,) = [q for q in double_requests(g.engine_port) if q["path"] == "/v1/messages"][-1:]
    assert req["body"] == quoted.replace('"h-laguna-xs"', '"laguna-xs"'), req["body"]


def test_claude_codes_attribution_line_goes_to_the_fallback_as_sent(box, make_gate, cloud):
    g = gate_with_fallback(box, make_gate, cloud, unit_extra="ExecStartPre=/bin/false\n")
    r = post(g.conn(timeout=60), "/v1/messages", CLAUDE_BODY.encode(), {"anthropic-version": "2023-06-01"})
    assert r.status == 200, r.read()
    (req,) = [q for q in cloud.requests() if q["path"] == "/v1/messages"][-1:]
    assert req["body"] == CLAUDE_BODY.replace('"h-laguna-xs"', '"cloud-model"'), req["body"]


def test_a_fallback_that_cannot_be_reached_after_the_budget_charges_nothing(box, make_gate, tmp):
    """rule:usage-charge: the engine's 200 head came and its first token did not (FirstTokenBudgetSec=); the
    fallback that takes the request cannot be reached, and the client gets an error: no tokens are charged for
    it. Before, the engine's attempt's usage reading outlived it, and the error was charged as a cut stream."""
    gone = types.SimpleNamespace(url="http://127.0.0.1:%d" % free_port(), keyfile=os.path.join(tmp, "gone.key"))
    open(gone.keyfile, "w").write(KEY + "\n")
    g = gate_with_fallback(box, make_gate, gone, engine_extra="FirstTokenBudgetSec=1s\n")
    r, body = ask(g, "[[hang]]", stream=True)
    assert r.status in (502, 503), (r.status, body)
    line = g.wait_log("POST /v1/chat/completions")
    assert " tokens=" not in line, line
