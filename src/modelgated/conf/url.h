/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The http:// and https:// base URLs of [Host], [Engine] and [Fallback] URL=. */

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

/* An http:// base URL, split. The address is resolved separately (config_resolve). */
typedef struct HttpUrl {
        char *text;      /* as written */
        char *host;      /* without brackets */
        char *authority; /* for the Host: header, "host:port" or "[v6]:port" */
        char *base_path; /* "" or "/prefix" without a trailing slash */
        uint16_t port;
        bool tls; /* https:// */
        struct sockaddr_storage address;
        socklen_t address_len;
} HttpUrl;

/* Replaces *ret on success only. -EPROTONOSUPPORT for another scheme, -EINVAL for a bad URL. */
int http_url_parse(const char *s, HttpUrl *ret);
void http_url_done(HttpUrl *u);
