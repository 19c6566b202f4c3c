/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The journal's MESSAGE_ID= of modelgate's entries with fields of their own (rule:journal-fields,
 * modelgated(8) LOGS), made once with systemd-id128 new and never changed: `journalctl
 * MESSAGE_ID=58273865da7740e2a210cc646f682fa2` is every request's line, whatever its words say. */

/* the access line: one per request */
#define MESSAGE_ID_ACCESS "58273865da7740e2a210cc646f682fa2"
/* a host's engine up after a switch (or a start), with how long it took */
#define MESSAGE_ID_SWITCH "60ec617dd2484bebab6753b59508d8b8"
