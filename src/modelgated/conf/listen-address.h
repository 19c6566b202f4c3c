/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* [Proxy] Listen=: what a value may be, read once where the configuration is checked (so that
 * --check-config and a reload name file and line) and again where the listener is bound. */

#include <sys/socket.h>

/* Without Listen= and without socket activation */
#define LISTEN_ADDRESS_DEFAULT "127.0.0.1:8080"

/* "127.0.0.1:8080", "[::1]:8080", "8080" (every address, IPv6 and IPv4), "/run/x.sock". 0 with the address
 * in *ss and *sl (both optional, to only check); -EINVAL when it is none of them, -ENAMETOOLONG for a path
 * that does not fit a unix socket address. */
int listen_address_parse(const char *s, struct sockaddr_storage *ss, socklen_t *sl);
