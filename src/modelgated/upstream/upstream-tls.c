/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What https adds to an upstream connection: the one TLS context of the process, an SSL per
 * connection bound to the name (or address) its certificate must be for, the handshake after the TCP
 * connect, and reads and writes through SSL with the results read(2) and send(2) give, so that
 * upstream-connection.c runs one state machine for http and https alike. This is the lowest part: it
 * calls none of the others, and what the handshake came to goes back to the connection as a result. */

#include <assert.h>
#include <arpa/inet.h>
#include <limits.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <unistd.h>

#include "modelgated/upstream/upstream-internal.h"
#include "shared/log.h"

/* One TLS context for the process: the system's trusted CAs ($SSL_CERT_FILE/$SSL_CERT_DIR when set),
 * certificates verified, TLS 1.2 at least. */
static SSL_CTX *tls_context(UpstreamPool *p) {
        if (p->tls_ctx)
                return p->tls_ctx;
        SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
        if (!ctx)
                return NULL;
        if (SSL_CTX_set_default_verify_paths(ctx) != 1 ||
            SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1) {
                SSL_CTX_free(ctx);
                return NULL;
        }
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
        SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
        p->tls_ctx = ctx;
        return ctx;
}

SSL_CTX *upstream_tls_context_free(SSL_CTX *ctx) {
        SSL_CTX_free(ctx);
        return NULL;
}

int upstream_tls_new(Upstream *u, int fd) {
        assert(u);
        SSL_CTX *ctx = tls_context(u->pool);
        struct in6_addr a;
        bool ip = inet_pton(AF_INET, u->tls_host, &a) == 1 || inet_pton(AF_INET6, u->tls_host, &a) == 1;

        if (!ctx)
                return -ENOMEM;
        SSL_free(u->ssl);
        u->ssl = SSL_new(ctx);
        if (!u->ssl || SSL_set_fd(u->ssl, fd) != 1)
                return -ENOMEM;
        if (ip) {
                if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(u->ssl), u->tls_host) != 1)
                        return -EINVAL;
        } else if (SSL_set_tlsext_host_name(u->ssl, u->tls_host) != 1 ||
                   SSL_set1_host(u->ssl, u->tls_host) != 1)
                return -ENOMEM;
        SSL_set_connect_state(u->ssl);
        return 0;
}

void upstream_tls_close(Upstream *u) {
        assert(u);
        SSL_free(u->ssl);
        u->ssl = NULL;
}

/* SSL_read()/SSL_write()'s result k as read(2)/send(2) would give it */
static ssize_t tls_result(Upstream *u, int k, bool reading) {
        if (k > 0)
                return k;
        switch (SSL_get_error(u->ssl, k)) {
        case SSL_ERROR_ZERO_RETURN:
                if (reading)
                        return 0;
                errno = EPIPE;
                return -1;
        case SSL_ERROR_WANT_READ:
        case SSL_ERROR_WANT_WRITE:
                errno = EAGAIN;
                return -1;
        case SSL_ERROR_SYSCALL:
                if (errno == 0) {
                        /* closed without close_notify: what plain HTTP would see */
                        if (reading)
                                return 0;
                        errno = EPIPE;
                }
                return -1;
        default:
                errno = EPROTO;
                return -1;
        }
}

ssize_t upstream_io_read(Upstream *u, void *buf, size_t n) {
        assert(u);
        if (!u->ssl)
                return read(u->fd, buf, n);
        ERR_clear_error();
        return tls_result(u, SSL_read(u->ssl, buf, (int)MIN(n, (size_t)INT_MAX)), true);
}

ssize_t upstream_io_write(Upstream *u, const void *buf, size_t n) {
        assert(u);
        if (!u->ssl)
                return send(u->fd, buf, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        ERR_clear_error();
        return tls_result(u, SSL_write(u->ssl, buf, (int)MIN(n, (size_t)INT_MAX)), false);
}

int upstream_handshake(Upstream *u) {
        assert(u);
        ERR_clear_error();
        int k = SSL_do_handshake(u->ssl);

        if (k == 1)
                return 1;
        switch (SSL_get_error(u->ssl, k)) {
        case SSL_ERROR_WANT_READ:
        case SSL_ERROR_WANT_WRITE:
                /* either ended in EAGAIN: the socket's next edge, whichever it is, goes on */
                return 0;
        default: {
                long v = SSL_get_verify_result(u->ssl);
                if (v != X509_V_OK) {
                        log_debug("TLS to %s: %s", u->authority, X509_verify_cert_error_string(v));
                        return -EKEYREJECTED;
                }
                log_debug("TLS to %s failed: %s", u->authority,
                          ERR_reason_error_string(ERR_peek_last_error()) ?: "?");
                return -EPROTO;
        }
        }
}
