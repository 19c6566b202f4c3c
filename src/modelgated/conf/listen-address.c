/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/un.h>

#include "modelgated/conf/listen-address.h"
#include "shared/parse-util.h"

int listen_address_parse(const char *s, struct sockaddr_storage *ret_ss, socklen_t *ret_sl) {
        struct sockaddr_storage buf;
        struct sockaddr_storage *ss = ret_ss ?: &buf;
        socklen_t sl;
        uint64_t port;
        char host[128];
        const char *colon;

        memset(ss, 0, sizeof(*ss));
        if (s[0] == '/') {
                struct sockaddr_un *un = (struct sockaddr_un *)ss;
                if (strlen(s) >= sizeof(un->sun_path))
                        return -ENAMETOOLONG;
                un->sun_family = AF_UNIX;
                strcpy(un->sun_path, s);
                sl = sizeof(*un);
                goto done;
        }
        if (safe_atou64(s, &port) == 0) {
                struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
                if (port == 0 || port > 65535)
                        return -EINVAL;
                in6->sin6_family = AF_INET6;
                in6->sin6_addr = in6addr_any;
                in6->sin6_port = htons((uint16_t)port);
                sl = sizeof(*in6);
                goto done;
        }
        if (s[0] == '[') {
                const char *e = strchr(s, ']');
                if (!e || e[1] != ':' || (size_t)(e - s - 1) >= sizeof(host))
                        return -EINVAL;
                memcpy(host, s + 1, (size_t)(e - s - 1));
                host[e - s - 1] = 0;
                colon = e + 1;
        } else {
                colon = strrchr(s, ':');
                if (!colon || (size_t)(colon - s) >= sizeof(host))
                        return -EINVAL;
                memcpy(host, s, (size_t)(colon - s));
                host[colon - s] = 0;
        }
        if (safe_atou64(colon + 1, &port) < 0 || port == 0 || port > 65535)
                return -EINVAL;
        struct sockaddr_in *in = (struct sockaddr_in *)ss;
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
        if (inet_pton(AF_INET, host, &in->sin_addr) == 1) {
                in->sin_family = AF_INET;
                in->sin_port = htons((uint16_t)port);
                sl = sizeof(*in);
        } else if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
                in6->sin6_family = AF_INET6;
                in6->sin6_port = htons((uint16_t)port);
                sl = sizeof(*in6);
        } else
                return -EINVAL;
done:
        if (ret_sl)
                *ret_sl = sl;
        return 0;
}
