/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* rule:refusal-words: the words that make coding agents retry a refusal anyway, for text modelgate did not
 * write that goes into one (the host's gpu.owner line in a 423, rule:gpu-owner; a Host in a 403,
 * rule:host-check). The list is pi's retry
 * pattern with the rule's own words: matched as pi matches them, anywhere, ASCII case ignored, and where
 * pi's pattern allows any one character between two words ("rate limit", "rate-limit", "ratelimit") any one
 * UTF-8 character. */

#include <stdbool.h>
#include <stddef.h>

/* The first retry word in s: true with its offset and length */
bool refusal_words_find(const char *s, size_t *ret_offset, size_t *ret_length);

/* Replaces, in place, every retry word in s by "…" (U+2026: something was left out here), until none is
 * left (a replacement may join two words into a new one). Returns how many were replaced. */
size_t refusal_words_strip(char *s);
