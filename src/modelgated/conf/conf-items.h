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

/* What a parser says of a value it refuses, the end of "[Host] Name='rtx-4090' is not valid: …": what is
 * wrong with it (the offending character) and what is allowed. */
#define CONFIG_WHY_MAX 256

/* 0, or a negative errno with why[] set (empty when there is nothing to add); -ENOMEM alone says nothing */
typedef int (*ConfigParser)(const char *value, void *data, char why[static CONFIG_WHY_MAX]);

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

/* For an error's hint: the known key of section, or the known section, that an unknown one most likely
 * meant to be (the same but for case, or a letter or two off); NULL if none is close */
const char *config_item_closest(SectionKind section, const char *key);
const char *section_kind_closest(const char *name);
/* The first section other than section that has key, or _SECTION_INVALID */
SectionKind config_item_section_of(SectionKind section, const char *key);
/* "[Proxy], [Host], … and [Alias]" */
const char *section_kind_list(void);
