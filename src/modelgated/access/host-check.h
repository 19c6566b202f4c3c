/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* rule:host-check: a request from a web page is answered only when its Host is a name modelgate answers
 * for, so that a page of another site whose name was made to lead here (DNS rebinding) cannot read
 * /activity or use the API through the operator's browser. Agents and curl send neither header that marks a
 * page, and are not checked. Pure: the connection's address and the machine's name are given. */

#include <stdbool.h>

#include "shared/macro.h"

/* The header that marks a request as a web page's (its values given, a missing one with .p NULL): "Origin",
 * "Sec-Fetch-Site", "Referer", or "User-Agent" when it begins with "Mozilla/" (every browser's, no agent's
 * or SDK's); NULL when none does. A rebinding page's requests are plain http to a name that is not
 * localhost, where browsers send no Sec-Fetch-* and a same-origin GET no Origin: what they cannot leave out
 * there is the User-Agent (Chrome and Safari let no script set it) and, unless the page asks for none, the
 * Referer. Sec-Fetch-Mode alone does not count: Node's fetch (undici) sends "Sec-Fetch-Mode: cors" with
 * every request of an agent. */
const char *host_check_browser_header(Span origin, Span sec_fetch_site, Span referer, Span user_agent);

/* The host part of a Host header's value, without its port, the brackets of an IPv6 address or a final
 * '.'; false when the value is not one (an empty span, a bracket left open, a port that is not a number) */
bool host_check_split(Span host, Span *ret_name);

/* Whether name (host_check_split()'s) is one modelgate answers for: a loopback address, local_address
 * (the address the connection came in on, numeric; NULL: not known), "localhost" or a name under
 * ".localhost" (RFC 6761: a browser resolves those itself), hostname (the machine's, and its first label;
 * NULL: none), or one of server_names ([Proxy] ServerNames=: names, "*.name" for any name under name, or
 * addresses). Case is ignored, and so is the port: a port forward changes it, a rebinding does not. */
bool host_check_allowed(Span name, const char *local_address, const char *hostname,
                        char *const *server_names);
