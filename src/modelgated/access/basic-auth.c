/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* HTTP Basic credentials, for the browser's /ui (rule:ui-key). */

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "modelgated/access/basic-auth.h"

#define BASIC_MAX 1024 /* the base64 text: far more than any key */

static int b64_value(char ch) {
        if (ch >= 'A' && ch <= 'Z')
                return ch - 'A';
        if (ch >= 'a' && ch <= 'z')
                return ch - 'a' + 26;
        if (ch >= '0' && ch <= '9')
                return ch - '0' + 52;
        if (ch == '+')
                return 62;
        if (ch == '/')
                return 63;
        return -1;
}

/* base64 with its padding, as RFC 7617 sends it: the decoded length, or -1 */
static ssize_t b64_decode(const char *p, size_t n, char *out) {
        size_t o = 0;
        unsigned acc = 0, bits = 0;

        if (n == 0 || n % 4 != 0)
                return -1;
        for (size_t i = 0; i < n; i++) {
                if (p[i] == '=') {
                        /* one or two, at the very end */
                        if (i < n - 2 || (i == n - 2 && p[n - 1] != '='))
                                return -1;
                        break;
                }
                int v = b64_value(p[i]);
                if (v < 0)
                        return -1;
                acc = (acc << 6) | (unsigned)v;
                bits += 6;
                if (bits >= 8) {
                        bits -= 8;
                        out[o++] = (char)((acc >> bits) & 0xff);
                }
        }
        return (ssize_t)o;
}

int basic_auth_key(Span value, char **ret_key) {
        char buf[BASIC_MAX];
        const char *p = value.p;
        size_t n = value.n;

        *ret_key = NULL;
        if (!p || n < 6 || strncasecmp(p, "Basic ", 6) != 0)
                return 0;
        p += 6, n -= 6;
        while (n > 0 && (*p == ' ' || *p == '\t'))
                p++, n--;
        while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t'))
                n--;
        if (n > BASIC_MAX)
                return 0;
        ssize_t k = b64_decode(p, n, buf);
        if (k < 0)
                return 0;
        for (ssize_t i = 0; i < k; i++)
                if ((unsigned char)buf[i] < 0x20 || buf[i] == 0x7f)
                        return 0;
        char *colon = memchr(buf, ':', (size_t)k);
        if (!colon)
                return 0;
        const char *key = colon + 1;
        size_t len = (size_t)(buf + k - key);
        if (len == 0) { /* "key:" : the user name is the key */
                key = buf;
                len = (size_t)(colon - buf);
        }
        if (len == 0)
                return 0;
        *ret_key = strndup(key, len);
        explicit_bzero(buf, sizeof(buf)); /* the key: not left on the stack */
        return *ret_key ? 1 : -ENOMEM;
}
