#!/usr/bin/python3
"""A stand-in for llama.cpp's llama-server in router mode (../shared/llama-server-api.md).

It behaves like the real server where a proxy can see it: /health, /models with
per-model status, /models/load and /models/unload, /models/sse, streaming chat,
completions and Anthropic messages in their real event formats, llama.cpp's error
shapes (exceed_context_size_error included), cpp-httplib's keep-alive rules
(connection closed after any status >= 400).

Knobs, per process (command line) or per request (a marker in the prompt text):
  --load-delay S     seconds a model takes to load (autoload blocks that long)
  --token-delay S    seconds between streamed tokens
  --list-delay S     seconds GET /models takes to answer (a big list on a busy host)
  --end chunk|close  end streams with the last chunk (current builds) or by
                     closing the connection (older builds)
  [[tokens:N]]       answer with N tokens
  [[size:N]]         pad each token to N bytes
  [[cut:N]]          stop after N tokens by closing the connection mid-stream
  [[hang]]           never send the first token (headers only); a closed connection ends it,
                     and the request's entry in /_double/requests gets "disconnected": true
  [[overflow]]       400 exceed_context_size_error
  [[error:N]]        a mid-stream error after N tokens
  [[crash]]          the process exits at once
  [[delay:S]]        sleep S seconds before answering
  [[status:N]]       answer N with llama.cpp's error shape (404 not_found_error, 503 unavailable_error, ...)

For tests: POST /_double/events {"n":N,"size":S} sends N download_progress feed
events padded to S bytes; GET /models?reload=1 sends models_reload ("*").
GET /_double/requests lists what it received (method, path, headers,
body length, sha256, and the body when under 64 KiB); DELETE clears the list.
"""

import argparse
import hashlib
import json
import os
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

ARGS = None
LOCK = threading.Lock()
MODELS = {}  # id -> {"status": ..., "failed": bool}
REQUESTS = []
SSE_LISTENERS = []
START = int(time.time())
GENERATE_ROUTES = ("/v1/chat/completions", "/chat/completions", "/v1/completions", "/completion", "/completions",
                   "/v1/messages", "/v1/responses", "/responses")
RESPONSES = ("/v1/responses", "/responses")
# the routes that read a model (the router's own /props included); any other path is 404
PROCESSING = {}  # model -> generations under way, for /slots

MODEL_ROUTES = GENERATE_ROUTES + ("/models/load", "/models/unload", "/props", "/slots", "/tokenize", "/v1/embeddings",
                                  "/embeddings", "/v1/messages/count_tokens")


def now():
    return int(time.time())


def notify(model, event, data=None):
    ev = {"model": model, "event": event}
    if data is not None:
        ev["data"] = data
    line = ("data: " + json.dumps(ev, separators=(",", ":")) + "\n\n").encode()
    with LOCK:
        listeners = list(SSE_LISTENERS)
    for q in listeners:
        q.append(line)


def model_entry(mid):
    m = MODELS[mid]
    status = {"value": m["status"], "args": ["llama-server", "--port", str(ARGS.port), "--alias", mid]}
    if m.get("failed"):
        status["failed"] = True
        status["exit_code"] = 1
    e = {"id": mid, "aliases": [], "tags": [], "object": "model", "owned_by": "llamacpp",
         "created": now(), "status": status,
         "architecture": {"input_modalities": ["text"], "output_modalities": ["text"]},
         "source": "models_dir", "can_remove": False}
    if m["status"] == "loaded":
        e["meta"] = {"n_ctx": ARGS.n_ctx, "n_vocab": 32000, "n_params": 1000000}
    return e


def do_load(mid):
    with LOCK:
        MODELS[mid]["status"] = "loading"
    notify(mid, "model_status", {"status": "loading"})

    def finish():
        time.sleep(ARGS.load_delay / 2)
        notify(mid, "status_change", {"status": "loading", "progress": {"stage": "text_model", "value": 0.5}})
        time.sleep(ARGS.load_delay / 2)
        with LOCK:
            MODELS[mid]["status"] = "loaded"
        notify(mid, "status_change", {"status": "loaded", "info": model_entry(mid)})

    threading.Thread(target=finish, daemon=True).start()


def wait_loaded(mid):
    while True:
        with LOCK:
            st = MODELS[mid]["status"]
        if st == "loaded":
            return
        time.sleep(0.02)


STARTED = 0.0


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # http.server writes a response's head and its body apart: with Nagle's algorithm the second waits for
    # the peer's delayed ACK, some 40 ms a response, a delay of the double's own making
    disable_nagle_algorithm = True
    server_version = "llama.cpp"
    sys_version = ""

    def log_message(self, fmt, *args):
        if ARGS.verbose:
            sys.stderr.write("double: " + (fmt % args) + "\n")

    # -- plumbing ---------------------------------------------------------
    def read_body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = b""
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length", "0") or 0)
        return self.rfile.read(n) if n else b""

    def record(self, body):
        entry = {"method": self.command, "path": self.path,
                 "headers": [[k, v] for k, v in self.headers.items()],
                 "body_length": len(body), "body_sha256": hashlib.sha256(body).hexdigest()}
        if len(body) < 65536:
            entry["body"] = body.decode("utf-8", "replace")
        with LOCK:
            REQUESTS.append(entry)
            del REQUESTS[:-200]
        self.entry = entry

    def hang(self, ping=False):
        """[[hang]]: never answer (more), like a GPU stuck in a long prompt, until the client closes the
        connection, which llama-server notices and cancels the task for; the request's entry records it"""
        import select
        import socket
        while True:
            r, _, _ = select.select([self.connection], [], [], 1.0)
            if r:
                try:
                    gone = self.connection.recv(1, socket.MSG_PEEK) == b""
                except OSError:
                    gone = True
                if gone:
                    with LOCK:
                        self.entry["disconnected"] = True
                    self.close_connection = True
                    return
            elif ping:
                self.chunk(":\n\n")

    def send_json(self, status, obj):
        body = json.dumps(obj, separators=(",", ":")).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        if ARGS.name:
            self.send_header("X-Double", ARGS.name)
        self.send_header("Content-Length", str(len(body)))
        if status >= 400:
            # cpp-httplib >= 0.28: "Don't leave connections open after errors"
            self.send_header("Connection", "close")
            self.close_connection = True
        else:
            self.send_header("Keep-Alive", "timeout=5, max=100")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def send_error_json(self, status, message, etype, **extra):
        err = {"code": status, "message": message, "type": etype}
        err.update(extra)
        self.send_json(status, {"error": err})

    def start_stream(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        if ARGS.name:
            self.send_header("X-Double", ARGS.name)
        self.send_header("X-Accel-Buffering", "no")
        if ARGS.end == "close":
            self.send_header("Connection", "close")
            self.close_connection = True
        else:
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Keep-Alive", "timeout=5, max=100")
        self.end_headers()
        self.wfile.flush()

    def chunk(self, data):
        if isinstance(data, str):
            data = data.encode()
        if ARGS.end == "close":
            self.wfile.write(data)
        else:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def end_stream(self):
        if ARGS.end == "close":
            self.wfile.flush()
            self.close_connection = True
        else:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    def cut(self):
        self.wfile.flush()
        self.close_connection = True
        try:
            import socket
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    # -- requests ----------------------------------------------------------
    def do_GET(self):
        self.handle_any(b"")

    def do_HEAD(self):
        self.handle_any(b"")

    def do_DELETE(self):
        self.handle_any(self.read_body())

    def do_POST(self):
        self.handle_any(self.read_body())

    def slot_action(self, slot, action, body):
        """llama-server's POST /slots/<id>?action=save|restore (--slot-save-path): a save takes
        --slot-save-delay seconds; a restore fails as a missing file does with --slot-restore-fails"""
        filename = json.loads(body or b"{}").get("filename", "")
        if action == "save" and ARGS.slot_save_fault == "hang":
            return self.hang()  # a host that stops answering mid-save
        if action == "save" and ARGS.slot_save_fault == "cut":
            return self.cut()  # the connection dies: no answer at all
        if ARGS.slot_save_fault == "501":
            # llama-server without --slot-save-path
            return self.send_error_json(501, "This server does not support slots action. Start it with "
                                        "`--slot-save-path`", "not_supported_error")
        if action == "save":
            time.sleep(ARGS.slot_save_delay)
            if ARGS.slot_save_dir:
                open(os.path.join(ARGS.slot_save_dir, os.path.basename(filename)), "w").close()
            return self.send_json(200, {"id_slot": int(slot), "filename": filename, "n_saved": 1000,
                                        "n_written": 4096000, "timings": {"save_ms": 1.0}})
        if action == "restore" and (ARGS.slot_restore_fails or ARGS.slot_save_dir and not os.path.exists(
                os.path.join(ARGS.slot_save_dir, os.path.basename(filename)))):
            return self.send_error_json(400, "Unable to restore slot: No available space in KV cache or invalid "
                                        "slot save file", "invalid_request_error")
        if action == "restore":
            time.sleep(ARGS.slot_restore_delay)
            return self.send_json(200, {"id_slot": int(slot), "filename": filename, "n_restored": 1000,
                                        "n_read": 4096000, "timings": {"restore_ms": 1.0}})
        return self.send_error_json(400, "Invalid action", "invalid_request_error")

    def handle_any(self, body):
        url = urlsplit(self.path)
        path, query = url.path, parse_qs(url.query)
        if path == "/_double/events" and self.command == "POST":
            # a burst of feed events for tests: {"n": N, "size": bytes of padding each}
            req = json.loads(body or b"{}")
            for i in range(int(req.get("n", 1))):
                notify(req.get("model", "laguna-xs"), "download_progress",
                       {"progress": {"x" * int(req.get("size", 0)): {"done": i, "total": int(req.get("n", 1))}}})
            return self.send_json(200, {"success": True})
        if path == "/_double/requests":
            if self.command == "DELETE":
                with LOCK:
                    REQUESTS.clear()
                return self.send_json(200, {"success": True})
            with LOCK:
                return self.send_json(200, list(REQUESTS))
        self.record(body)
        if ARGS.base_path:
            # a cloud API under a base path: nothing outside it is served
            if not path.startswith(ARGS.base_path + "/"):
                return self.send_error_json(404, "File Not Found", "not_found_error")
            path = path[len(ARGS.base_path):]
        if time.monotonic() < STARTED + ARGS.startup_delay:
            # llama-server binds its port early and answers 503 until the model is loaded
            return self.send_json(503, {"error": {"code": 503, "message": "Loading model",
                                                  "type": "unavailable_error"}})
        if path in ("/health", "/v1/health"):
            return self.send_json(200, {"status": "ok"})
        if path == "/models" and self.command == "GET" and query.get("reload"):
            notify("*", "models_reload")
        if path in ("/models", "/v1/models") and self.command in ("GET", "HEAD"):
            time.sleep(ARGS.list_delay)
            with LOCK:
                data = [model_entry(m) for m in MODELS]
            return self.send_json(200, {"data": data, "object": "list"})
        if path == "/models/sse":
            return self.models_sse()
        if path.startswith("/slots/") and self.command == "POST" and ARGS.slot_save_delay is not None:
            return self.slot_action(path[len("/slots/"):], query.get("action", [""])[0], body)
        if path not in MODEL_ROUTES:
            # cpp-httplib answers a route llama-server does not register before any handler reads a model
            return self.send_error_json(404, "File Not Found", "not_found_error")

        if self.command in ("GET", "HEAD"):
            model = query.get("model", [None])[0]
            req = {}
        else:
            try:
                req = json.loads(body or b"{}")
            except ValueError:
                return self.send_error_json(500, "[json.exception.parse_error.101] parse error", "server_error")
            if not isinstance(req, dict):
                return self.send_error_json(400, "invalid request", "invalid_request_error")
            model = req.get("model")

        if path == "/models/load":
            return self.models_load(model)
        if path == "/models/unload":
            return self.models_unload(model)
        if path == "/props" and not model:
            return self.send_json(200, {"role": "router", "max_instances": 1, "models_autoload": True})

        if not model:
            return self.send_error_json(400, "model name is missing from the request", "invalid_request_error")
        with LOCK:
            known = model in MODELS
            st = MODELS[model]["status"] if known else None
        if not known:
            return self.send_error_json(400, "model '%s' not found" % model, "invalid_request_error")
        if path == "/slots" and query.get("autoload") == ["false"] and st != "loaded":
            # the router with autoload off: a model that is not running has no slots
            return self.send_error_json(400, "model is not loaded", "invalid_request_error")
        if st == "unloaded":
            do_load(model)
        wait_loaded(model)

        if path in ("/props",):
            return self.send_json(200, {"model_alias": model, "model_path": "/m/%s.gguf" % model,
                                        "default_generation_settings": {"n_ctx": ARGS.n_ctx},
                                        "query": url.query})
        if path == "/slots":
            # one slot, at work while a generation for the model runs (whoever sent it)
            with LOCK:
                busy = PROCESSING.get(model, 0) > 0
            slot = {"id": 0, "n_ctx": ARGS.n_ctx, "is_processing": busy, "model": model}
            if ARGS.slot_save_delay is not None:
                slot["n_prompt_tokens"] = 1000  # a prompt in the slot, for rule:prompt-cache
            return self.send_json(200, [slot])
        if path == "/tokenize":
            return self.send_json(200, {"tokens": list(range(len(str(req.get("content", "")).split())))})
        if path == "/v1/messages/count_tokens":
            # llama-server's handle_count_tokens (Anthropic): {"input_tokens": N}; here a word is a token
            words = sum(len(str(m.get("content", "")).split()) for m in req.get("messages") or [])
            return self.send_json(200, {"input_tokens": words})
        if path in ("/v1/embeddings", "/embeddings"):
            return self.send_json(200, {"model": model, "object": "list",
                                        "usage": {"prompt_tokens": 1, "total_tokens": 1},
                                        "data": [{"embedding": [0.1, 0.2, 0.3], "index": 0,
                                                  "object": "embedding"}]})
        if path in GENERATE_ROUTES:
            with LOCK:
                PROCESSING[model] = PROCESSING.get(model, 0) + 1
            try:
                return self.generate(path, model, req, body)
            finally:
                with LOCK:
                    PROCESSING[model] -= 1
        return self.send_error_json(404, "File Not Found", "not_found_error")

    def models_sse(self):
        q = []
        with LOCK:
            SSE_LISTENERS.append(q)
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.flush()
            while True:
                while q:
                    self.chunk(q.pop(0))
                time.sleep(0.02)
        except OSError:
            pass
        finally:
            with LOCK:
                SSE_LISTENERS.remove(q)
            self.close_connection = True

    def models_load(self, model):
        with LOCK:
            if model not in MODELS:
                known = False
            else:
                known = True
                st = MODELS[model]["status"]
        if not known:
            return self.send_error_json(404, "model is not found", "not_found_error")
        if st in ("loading", "loaded", "sleeping"):
            return self.send_error_json(400, "model is already running", "invalid_request_error")
        do_load(model)
        return self.send_json(200, {"success": True})

    def models_unload(self, model):
        with LOCK:
            if model not in MODELS:
                return self.send_error_json(400, "model is not found", "invalid_request_error")
            if MODELS[model]["status"] not in ("loading", "loaded", "sleeping"):
                return self.send_error_json(400, "model is not running", "invalid_request_error")
            MODELS[model]["status"] = "unloaded"
        notify(model, "status_change", {"status": "unloaded", "exit_code": 0})
        return self.send_json(200, {"success": True})

    def prompt_text(self, req):
        parts = []
        for m in req.get("messages", []) or []:
            c = m.get("content") if isinstance(m, dict) else None
            if isinstance(c, str):
                parts.append(c)
            elif isinstance(c, list):
                parts += [b.get("text", "") for b in c if isinstance(b, dict)]
        if isinstance(req.get("prompt"), str):
            parts.append(req["prompt"])
        # the Responses API: "input" is a string, or items whose content is a string or parts with text
        items = req.get("input")
        for m in ([{"content": items}] if isinstance(items, str) else items if isinstance(items, list) else []):
            c = m.get("content") if isinstance(m, dict) else None
            if isinstance(c, str):
                parts.append(c)
            elif isinstance(c, list):
                parts += [b.get("text", "") for b in c if isinstance(b, dict)]
        return " ".join(parts)

    @staticmethod
    def timings(n_prompt, n):
        """llama.cpp's timings (server-common.cpp, server_slot_stats::to_json): 2 ms a prompt token, 20 ms a
        generated one, nothing cached"""
        return {"cache_n": 0, "prompt_n": n_prompt, "prompt_ms": 2.0 * n_prompt, "prompt_per_token_ms": 2.0,
                "prompt_per_second": 500.0, "predicted_n": n, "predicted_ms": 20.0 * n,
                "predicted_per_token_ms": 20.0, "predicted_per_second": 50.0}

    @staticmethod
    def usage(n_prompt, n):
        """llama.cpp's usage on chat and completions (server-task.cpp, usage_json_oaicompat)"""
        return {"completion_tokens": n, "prompt_tokens": n_prompt, "total_tokens": n + n_prompt,
                "prompt_tokens_details": {"cached_tokens": 0}}

    def response_object(self, rid, mid, model, content, n_prompt, n):
        """llama.cpp's /v1/responses answer (server-task.cpp, to_json_oaicompat_resp)"""
        part = {"type": "output_text", "annotations": [], "logprobs": [], "text": content}
        return {"completed_at": now(), "created_at": now(), "id": rid, "model": model, "object": "response",
                "output": [{"content": [part], "id": mid, "role": "assistant", "status": "completed",
                            "type": "message"}],
                "status": "completed",
                "usage": {"input_tokens": n_prompt, "output_tokens": n, "total_tokens": n + n_prompt,
                          "input_tokens_details": {"cached_tokens": 0}}}

    def generate(self, path, model, req, body):
        text = self.prompt_text(req)
        knob = lambda name: (None if ARGS.no_knobs else re.search(r"\[\[%s(?::([0-9.]+))?\]\]" % name, text))
        if knob("status"):
            code = int(knob("status").group(1))
            kinds = {401: "authentication_error", 403: "permission_error", 404: "not_found_error",
                     413: "invalid_request_error", 422: "invalid_request_error", 429: "rate_limit_error",
                     503: "unavailable_error"}
            return self.send_error_json(code, "the double answers %d as asked" % code,
                                        kinds.get(code, "server_error"))
        if knob("crash"):
            os._exit(3)
        if knob("delay"):
            time.sleep(float(knob("delay").group(1)))
        n_prompt = max(1, len(text.split()))
        if knob("overflow"):
            return self.send_error_json(400, "request (%d tokens) exceeds the available context size (%d tokens), "
                                        "try increasing it" % (n_prompt + ARGS.n_ctx, ARGS.n_ctx),
                                        "exceed_context_size_error", n_prompt_tokens=n_prompt + ARGS.n_ctx,
                                        n_ctx=ARGS.n_ctx)
        n = int(knob("tokens").group(1)) if knob("tokens") else 5
        cut = int(knob("cut").group(1)) if knob("cut") else None
        err = int(knob("error").group(1)) if knob("error") else None
        size = int(knob("size").group(1)) if knob("size") else 0
        tokens = [("tok%d " % i).ljust(size, "x") for i in range(n)]
        stream = bool(req.get("stream"))
        anthropic = path == "/v1/messages"
        responses = path in RESPONSES
        cid = "chatcmpl-%032x" % (hash((time.time(), threading.get_ident())) & (2**128 - 1))
        if not stream:
            if knob("hang"):
                return self.hang()
            time.sleep(ARGS.token_delay * n)
            content = "".join(tokens)
            if responses:
                return self.send_json(200, self.response_object("resp_" + cid[9:], "msg_" + cid[9:], model,
                                                                content, n_prompt, n))
            if anthropic:
                return self.send_json(200, {"id": "msg_" + cid[9:], "type": "message", "role": "assistant",
                                            "content": [{"type": "text", "text": content}], "model": model,
                                            "stop_reason": "end_turn", "stop_sequence": None,
                                            "usage": {"cache_read_input_tokens": 0, "input_tokens": n_prompt,
                                                      "output_tokens": n}})
            if path in ("/completion", "/completions"):
                return self.send_json(200, {"index": 0, "content": content, "stop": True, "model": model,
                                            "tokens_predicted": n, "tokens_evaluated": n_prompt,
                                            "timings": self.timings(n_prompt, n)})
            obj = "text_completion" if path == "/v1/completions" else "chat.completion"
            choice = ({"text": content, "index": 0, "logprobs": None, "finish_reason": "stop"}
                      if obj == "text_completion" else
                      {"finish_reason": "stop", "index": 0, "message": {"role": "assistant", "content": content}})
            # in llama.cpp's order: timings appended last, after the id
            return self.send_json(200, {"choices": [choice], "created": now(), "model": model,
                                        "system_fingerprint": "b9500-double", "object": obj,
                                        "usage": self.usage(n_prompt, n), "id": cid,
                                        "timings": self.timings(n_prompt, n)})

        self.start_stream()
        self.chunk(":\n\n")
        if knob("hang"):
            return self.hang(ping=ARGS.ping)
        ev = lambda name, obj: self.chunk("event: %s\ndata: %s\n\n" % (name, json.dumps(obj, separators=(",", ":"))))
        data = lambda obj: self.chunk("data: %s\n\n" % json.dumps(obj, separators=(",", ":")))
        base = {"created": now(), "id": cid, "model": model, "system_fingerprint": "b9500-double",
                "object": "chat.completion.chunk"}
        if anthropic:
            ev("message_start", {"type": "message_start", "message": {
                "id": "msg_" + cid[9:], "type": "message", "role": "assistant", "content": [], "model": model,
                "stop_reason": None, "stop_sequence": None,
                "usage": {"cache_read_input_tokens": 0, "input_tokens": n_prompt, "output_tokens": 0}}})
            ev("content_block_start", {"type": "content_block_start", "index": 0,
                                       "content_block": {"type": "text", "text": ""}})
        elif responses:
            # llama.cpp's event sequence (server-task.cpp, to_json_oaicompat_resp and _stream)
            rid, mid = "resp_" + cid[9:], "msg_" + cid[9:]
            head = {"id": rid, "object": "response", "status": "in_progress"}
            ev("response.created", {"type": "response.created", "response": head})
            ev("response.in_progress", {"type": "response.in_progress", "response": head})
            ev("response.output_item.added", {"type": "response.output_item.added", "item": {
                "content": [], "id": mid, "role": "assistant", "status": "in_progress", "type": "message"}})
            ev("response.content_part.added", {"type": "response.content_part.added", "item_id": mid,
                                               "part": {"type": "output_text", "text": ""}})
        elif path == "/v1/chat/completions" or path == "/chat/completions":
            data(dict(base, choices=[{"finish_reason": None, "index": 0,
                                      "delta": {"role": "assistant", "content": None}}]))
        for i, t in enumerate(tokens):
            if cut is not None and i == cut:
                return self.cut()
            if err is not None and i == err:
                if anthropic:
                    ev("error", {"code": 500, "message": "generation failed", "type": "server_error"})
                else:
                    data({"error": {"code": 500, "message": "generation failed", "type": "server_error"}})
                return self.end_stream()
            time.sleep(ARGS.token_delay)
            if responses:
                ev("response.output_text.delta", {"type": "response.output_text.delta", "item_id": mid,
                                                  "delta": t})
            elif anthropic:
                ev("content_block_delta", {"type": "content_block_delta", "index": 0,
                                           "delta": {"type": "text_delta", "text": t}})
            elif path in ("/completion", "/completions"):
                data({"index": 0, "content": t, "tokens": [i], "stop": False, "id_slot": 0})
            elif path == "/v1/completions":
                data(dict(base, object="text_completion",
                          choices=[{"text": t, "index": 0, "logprobs": None, "finish_reason": None}]))
            else:
                data(dict(base, choices=[{"finish_reason": None, "index": 0, "delta": {"content": t}}]))
        if anthropic:
            ev("content_block_stop", {"type": "content_block_stop", "index": 0})
            ev("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                                 "usage": {"output_tokens": n}})
            ev("message_stop", {"type": "message_stop"})
        elif responses:
            final = self.response_object(rid, mid, model, "".join(tokens), n_prompt, n)
            part = final["output"][0]["content"][0]
            ev("response.output_text.done", {"type": "response.output_text.done", "item_id": mid,
                                             "text": part["text"]})
            ev("response.content_part.done", {"type": "response.content_part.done", "item_id": mid, "part": part})
            ev("response.output_item.done", {"type": "response.output_item.done", "item": final["output"][0]})
            del final["completed_at"]
            ev("response.completed", {"type": "response.completed", "response": final,
                                      "timings": self.timings(n_prompt, n)})
        elif path in ("/completion", "/completions"):
            data({"index": 0, "content": "", "stop": True, "model": model, "tokens_predicted": n,
                  "timings": self.timings(n_prompt, n)})
        else:
            data(dict(base, choices=[{"finish_reason": "stop", "index": 0, "delta": {}}],
                      timings=self.timings(n_prompt, n)))
            if (req.get("stream_options") or {}).get("include_usage"):
                data(dict(base, choices=[], usage=self.usage(n_prompt, n), timings=self.timings(n_prompt, n)))
            self.chunk("data: [DONE]\n\n")
        self.end_stream()


def main():
    global ARGS
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--models", default="laguna-xs", help="comma-separated model ids")
    p.add_argument("--loaded", default="", help="comma-separated ids loaded at start")
    p.add_argument("--load-delay", type=float, default=0.2)
    p.add_argument("--token-delay", type=float, default=0.01)
    p.add_argument("--list-delay", type=float, default=0.0, help="seconds GET /models takes to answer")
    p.add_argument("--end", choices=["chunk", "close"], default="chunk")
    p.add_argument("--n-ctx", type=int, default=4096)
    p.add_argument("--ping", action="store_true", help="send ':' pings while a request hangs")
    p.add_argument("--port-file", help="write the bound port here once listening")
    p.add_argument("--startup-delay", type=float, default=0.0,
                   help="answer 503 'Loading model' to everything for this long after start")
    p.add_argument("--name", default="", help="sent back in an X-Double header (which engine answered)")
    p.add_argument("--slot-save-delay", type=float, default=None,
                   help="as --slot-save-path: slots hold a prompt, POST /slots/N?action=save takes this long")
    p.add_argument("--slot-restore-fails", action="store_true", help="action=restore answers 400")
    p.add_argument("--slot-save-dir", help="a save leaves its file here, and a restore of a file not there fails, "
                   "as llama-server's --slot-save-path DIR does (default: every restore is of a file that is there)")
    p.add_argument("--slot-restore-delay", type=float, default=0.0, help="seconds action=restore takes")
    p.add_argument("--slot-save-fault", choices=["hang", "cut", "501"],
                   help="action=save is taken and never answered (hang), or its connection is closed (cut); "
                   "501: every action is answered as by a server without --slot-save-path")
    p.add_argument("--verbose", action="store_true")
    p.add_argument("--tls-cert", help="serve https with this certificate (PEM) ...")
    p.add_argument("--tls-key", help="... and this key")
    p.add_argument("--base-path", default="", help="serve under this path prefix, as a cloud API at https://host/v1")
    p.add_argument("--no-knobs", action="store_true", help="ignore [[...]] in prompts (a stand-in for a cloud API)")
    ARGS = p.parse_args()
    global STARTED
    STARTED = time.monotonic()
    for m in ARGS.models.split(","):
        if m:
            MODELS[m] = {"status": "unloaded"}
    for m in ARGS.loaded.split(","):
        if m in MODELS:
            MODELS[m]["status"] = "loaded"
    # llama-server accepts on its own thread at once; Python's accept loop is slower, and with the
    # default backlog of 5 a burst of connections (a switch releasing a hundred waiting requests) is reset
    ThreadingHTTPServer.request_queue_size = 1024
    family = ThreadingHTTPServer
    if ":" in ARGS.host:
        import socket

        class V6(ThreadingHTTPServer):
            address_family = socket.AF_INET6
        family = V6
    srv = family((ARGS.host, ARGS.port), Handler)
    srv.daemon_threads = True
    if ARGS.tls_cert:
        # https, for the fallback's tests: a cloud API speaks TLS
        import ssl
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(ARGS.tls_cert, ARGS.tls_key)
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    ARGS.port = srv.server_address[1]
    if ARGS.port_file:
        tmp = ARGS.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(str(ARGS.port))
        os.rename(tmp, ARGS.port_file)
    print("llama-double listening on %s:%d" % (ARGS.host, ARGS.port), file=sys.stderr, flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
