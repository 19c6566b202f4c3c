/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The one log line each request leaves (rule:access-line, rule:log-escaped, modelgated(8) LOGS), as a pure
 * function of what the request was and how it ended: every client-supplied string in it is escaped, so no
 * request can forge a line or a priority. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "modelgated/api/request-record.h"
#include "shared/macro.h"
#include "shared/time-util.h"

/* Writes the line into buf (cut at size, never NUL-terminated) and returns its length. */
size_t access_line_format(char *buf, size_t size, const RequestRecord *l);

/* rule:journal-fields: the line's MODELGATE_* fields for the journal, "NAME=value" each, written into buf
 * (size bytes) and pointed at by fields (room for ACCESS_LINE_MAX_FIELDS); only those known. Strings of the
 * client's are escaped as in the line. Returns how many. */
#define ACCESS_LINE_MAX_FIELDS 27
struct iovec;
size_t access_line_fields(char *buf, size_t size, struct iovec *fields, const RequestRecord *l);
