/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* config_resolve(): what the configuration names, read once at load so that no request waits on it:
 * addresses (blocking getaddrinfo), fallback keys, warmup bodies and the keys file. */

#include <assert.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "modelgated/conf/conf.h"
#include "shared/fileio.h"
#include "shared/keys-file.h"
#include "shared/log.h"

/* A secret in a file: the first line, without its line end. */
static int read_secret(const char *path, char **ret) {
        _cleanup_free_ char *s = NULL;
        size_t n;
        int r;

        r = read_full_file(path, &s, &n);
        if (r < 0)
                return r;
        s[strcspn(s, "\r\n")] = 0;
        if (!*s)
                return -ENODATA;
        *ret = TAKE_PTR(s);
        return 0;
}

int config_load_keys(Config *c, const char *path) {
        assert(c);
        _cleanup_(keys_file_done) KeysFile f = {};
        _cleanup_free_ char *error = NULL;
        int r;

        c->access.key_hashes = mfree(c->access.key_hashes);
        c->access.key_tiers = mfree(c->access.key_tiers);
        c->access.n_keys = 0;
        r = keys_file_read(path, &f, &error);
        char w[256];
        if (r == -ENOENT) {
                log_warning("%s[Access] KeysFile=%s does not exist: no client has a key",
                            config_where(c, "KeysFile", w), path);
                return 0;
        }
        if (r == -EBADMSG)
                return config_error(c, EINVAL, "%s", error);
        if (r < 0)
                return config_error(c, r, "%s[Access] KeysFile=%s cannot be read: %m",
                                    config_where(c, "KeysFile", w), path);

        c->access.key_hashes = reallocarray(NULL, f.n_keys, SHA256_DIGEST_SIZE);
        c->access.key_tiers = reallocarray(NULL, f.n_keys, sizeof(size_t));
        if (f.n_keys > 0 && (!c->access.key_hashes || !c->access.key_tiers))
                return log_oom();
        for (size_t k = 0; k < f.n_keys; k++) {
                const KeyEntry *e = &f.keys[k];
                ssize_t t = -1;

                for (size_t i = 0; i < c->n_tiers; i++)
                        if (streq(c->tiers[i].name, e->tier))
                                t = (ssize_t)i;
                if (t < 0)
                        return config_error(c, EINVAL, "%s:%zu: tier '%s' has no [Tier] section", path,
                                            e->line + 1, e->tier);
                memcpy(c->access.key_hashes[k], e->digest, SHA256_DIGEST_SIZE);
                c->access.key_tiers[k] = (size_t)t;
                c->access.n_keys++;
        }
        return 0;
}

static int resolve_url(Config *c, HttpUrl *u, const char *what) {
        struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV}, *res = NULL;
        char port[8];
        int r;

        snprintf(port, sizeof(port), "%u", u->port);
        r = getaddrinfo(u->host, port, &hints, &res);
        if (r != 0)
                return config_error(c, EHOSTUNREACH, "%s: cannot resolve '%s': %s", what, u->host,
                                    gai_strerror(r));
        memcpy(&u->address, res->ai_addr, res->ai_addrlen);
        u->address_len = res->ai_addrlen;
        freeaddrinfo(res);
        return 0;
}

static int resolve_named_url(Config *c, const char *section, const char *name, HttpUrl *u) {
        _cleanup_free_ char *what = NULL;

        if (!u->text) /* none, or one that did not parse: said already */
                return 0;
        if (asprintf(&what, "[%s] %s URL=%s", section, name, u->text) < 0)
                return log_oom();
        return resolve_url(c, u, what);
}

/* $CREDENTIALS_DIRECTORY/name: -ENOENT when the unit loads no credentials (no LoadCredential=) */
static int credential_path(const char *name, char **ret) {
        const char *d = getenv("CREDENTIALS_DIRECTORY");

        if (!d)
                return -ENOENT;
        return asprintf(ret, "%s/%s", d, name) < 0 ? -ENOMEM : 0;
}

static int resolve_fallback(Config *c, FallbackConf *f) {
        _cleanup_free_ char *path = NULL;
        int r, k;

        r = resolve_named_url(c, "Fallback", f->name, &f->url);
        if (r == -ENOMEM)
                return r;
        k = f->key_credential ? credential_path(f->key_credential, &path) : 0;
        if (k == -ENOMEM)
                return log_oom();
        if (k < 0)
                return config_error(c, ENOENT,
                                    "%s:%u: [Fallback] '%s' KeyCredential=%s: $CREDENTIALS_DIRECTORY is "
                                    "not set (LoadCredential= in the unit)",
                                    f->file, f->line, f->name, f->key_credential);
        if (path || f->key_file) {
                k = read_secret(path ?: f->key_file, &f->key);
                if (k < 0)
                        r = config_error(c, k, "%s:%u: [Fallback] '%s': the key in %s cannot be read: %m",
                                         f->file, f->line, f->name, path ?: f->key_file);
        }
        if (f->key && !f->url.tls)
                log_warning(
                        "%s:%u: [Fallback] '%s': URL=%s is http://, so its key crosses the network in clear "
                        "text; use https://",
                        f->file, f->line, f->name, f->url.text);
        return r;
}

/* rule:shared-counts: Redis's password, from the unit's credential */
static int resolve_redis(Config *c) {
        _cleanup_free_ char *path = NULL;
        AccessConf *a = &c->access;
        char w[256];
        int k;

        if (!a->redis_password_credential)
                return 0;
        k = credential_path(a->redis_password_credential, &path);
        if (k == -ENOMEM)
                return log_oom();
        if (k < 0)
                return config_error(
                        c, ENOENT,
                        "%s[Access] RedisPasswordCredential=%s: $CREDENTIALS_DIRECTORY is not set "
                        "(LoadCredential= in the unit)",
                        config_where(c, "RedisPasswordCredential", w), a->redis_password_credential);
        k = read_secret(path, &a->redis_password);
        if (k < 0)
                return config_error(c, k, "%s[Access] RedisPasswordCredential=%s cannot be read: %m",
                                    config_where(c, "RedisPasswordCredential", w), path);
        return 0;
}

int config_resolve(Config *c) {
        assert(c);
        int r = 0, k;

        k = resolve_redis(c);
        if (k == -ENOMEM)
                return k;
        if (k < 0)
                r = k;

        for (size_t i = 0; i < c->n_fallbacks; i++) {
                k = resolve_fallback(c, &c->fallbacks[i]);
                if (k == -ENOMEM)
                        return k;
                if (k < 0)
                        r = k;
        }
        for (size_t i = 0; i < c->n_engines; i++) {
                EngineConf *e = &c->engines[i];
                if (!e->warmup_request)
                        continue;
                k = read_full_file(e->warmup_request, &e->warmup_body, &e->warmup_size);
                if (k < 0)
                        r = config_error(c, k, "%s:%u: [Engine] '%s' WarmupRequest=%s cannot be read: %m",
                                         e->file, e->line, e->name, e->warmup_request);
        }
        if (c->access.keys_file) {
                k = config_load_keys(c, c->access.keys_file);
                if (k < 0)
                        r = k;
        }
        for (size_t i = 0; i < c->n_hosts; i++) {
                k = resolve_named_url(c, "Host", c->hosts[i].name, &c->hosts[i].url);
                if (k == -ENOMEM)
                        return k;
                if (k < 0)
                        r = k;
        }
        for (size_t i = 0; i < c->n_engines; i++) {
                if (!c->engines[i].url.text)
                        continue;
                k = resolve_named_url(c, "Engine", c->engines[i].name, &c->engines[i].url);
                if (k == -ENOMEM)
                        return k;
                if (k < 0)
                        r = k;
        }
        return r;
}
