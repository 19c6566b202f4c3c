/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The keys of modelgate.conf(5): for each, its section, its value's parser and where in Config (or in
 * the section's HostConf, EngineConf, …) the value goes. conf-parse.c reads the text; this says what it
 * means. */

#include <errno.h>
#include <stddef.h>

typedef enum SectionKind {
        SECTION_PROXY,
        SECTION_HOST,
        SECTION_ENGINE,
        SECTION_FALLBACK,
        SECTION_ACCESS,
        SECTION_TIER,
        SECTION_ALIAS,
        _SECTION_MAX,
        _SECTION_INVALID = -EINVAL,
} SectionKind;

typedef int (*ConfigParser)(const char *value, void *data);

typedef struct ConfigItem {
        SectionKind section;
        const char *key;
        ConfigParser parse;
        size_t offset;
} ConfigItem;

const char *section_kind_to_string(SectionKind k);
SectionKind section_kind_from_string(const char *s);
/* NULL: section has no such key */
const ConfigItem *config_item_find(SectionKind section, const char *key);
