/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Base URLs: scheme, host (bracketed IPv6 too), port and a path prefix; no query, fragment or user info,
 * since a base URL only ever has paths appended. */

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "modelgated/conf/url.h"
#include "shared/macro.h"
#include "shared/parse-util.h"

void http_url_done(HttpUrl *u) {
        free(u->text);
        free(u->host);
        free(u->authority);
        free(u->base_path);
        *u = (HttpUrl){};
}

int http_url_parse(const char *s, HttpUrl *ret) {
        assert(s);
        _cleanup_free_ char *host = NULL, *authority = NULL, *base = NULL, *text = NULL;
        const char *p, *hs, *he, *path;
        uint64_t port = 80;
        bool tls = false;

        if (strncasecmp(s, "https://", 8) == 0) {
                tls = true;
                port = 443;
                p = s + 8;
        } else if (strncasecmp(s, "http://", 7) == 0)
                p = s + 7;
        else
                return -EPROTONOSUPPORT;
        if (*p == '[') {
                hs = p + 1;
                he = strchr(hs, ']');
                if (!he)
                        return -EINVAL;
                p = he + 1;
        } else {
                hs = p;
                he = p + strcspn(p, ":/?#");
                p = he;
        }
        if (he == hs)
                return -EINVAL;
        if (*p == ':') {
                char buf[8];
                size_t n = strcspn(p + 1, "/?#");
                if (n == 0 || n >= sizeof(buf))
                        return -EINVAL;
                memcpy(buf, p + 1, n);
                buf[n] = 0;
                if (safe_atou64(buf, &port) < 0 || port == 0 || port > 65535)
                        return -EINVAL;
                p += 1 + n;
        }
        path = p;
        if (*path && *path != '/')
                return -EINVAL;
        if (strpbrk(path, "?# \t"))
                return -EINVAL;

        host = strndup(hs, (size_t)(he - hs));
        if (!host)
                return -ENOMEM;
        for (const char *c = host; *c; c++)
                if (!isalnum((unsigned char)*c) && !strchr(".-:_%", *c))
                        return -EINVAL;
        bool v6 = strchr(host, ':');
        if (asprintf(&authority, v6 ? "[%s]:%u" : "%s:%u", host, (unsigned)port) < 0)
                return -ENOMEM;
        size_t pl = strlen(path);
        while (pl > 0 && path[pl - 1] == '/')
                pl--;
        base = strndup(path, pl);
        text = strdup(s);
        if (!base || !text)
                return -ENOMEM;

        http_url_done(ret);
        *ret = (HttpUrl){
                .text = TAKE_PTR(text),
                .host = TAKE_PTR(host),
                .authority = TAKE_PTR(authority),
                .base_path = TAKE_PTR(base),
                .port = (uint16_t)port,
                .tls = tls,
        };
        return 0;
}
