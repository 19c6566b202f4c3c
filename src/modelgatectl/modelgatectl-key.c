/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* modelgatectl key: the keys file that modelgate.conf names, edited in place (atomically), then Reload()
 * so that the daemon knows at once; the key itself is printed once and stored nowhere. */

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>

#include "modelgated/conf/conf.h"
#include "modelgatectl/modelgatectl.h"
#include "shared/keys-file.h"
#include "shared/log.h"
#include "shared/state-file.h"
#include "shared/strv.h"

static int load_keys_config(Config *c) {
        _cleanup_free_ char *path = NULL;
        int r;

        r = load_config(c, &path);
        if (r < 0)
                return r;
        if (!c->access.keys_file)
                return log_error_errno(SYNTHETIC_ERRNO(EINVAL),
                                       "%s has no [Access] KeysFile=: there is nowhere to keep keys", path);
        return 0;
}

static void reload_daemon(void) {
        _cleanup_(sd_bus_flush_close_unrefp) sd_bus *bus = NULL;
        _cleanup_(sd_bus_error_free) sd_bus_error e = SD_BUS_ERROR_NULL;

        /* a stopped modelgate reads them when it starts: it is not started for that */
        if (connect_bus(&bus) < 0 || call_manager(bus, "Reload", /* start= */ false, &e, NULL) < 0)
                fprintf(stderr,
                        "modelgated was not reloaded (%s); it reads the keys at its next start or reload\n",
                        e.message ?: "not running");
}

static int key_list(const KeysFile *f) {
        for (size_t i = 0; i < f->n_keys; i++) {
                char hex[SHA256_HEX_SIZE];

                sha256_to_hex(f->keys[i].digest, hex);
                printf("%.12s  %s\n", hex, f->keys[i].tier);
        }
        return EXIT_OK;
}

/* The system service runs as User=modelgate: a keys file root makes for it is readable by its group. */
static int key_file_write(const KeysFile *f) {
        int r = keys_file_write(f, arg_user ? NULL : "modelgate");
        if (r == -ESRCH)
                log_warning("There is no group 'modelgate': the system service cannot read the new %s",
                            f->path);
        else if (r < 0)
                return log_error_errno(r, "Cannot write %s: %m", f->path);
        return 0;
}

static int key_add(const Config *c, KeysFile *f, const char *tier) {
        uint8_t raw[24], digest[SHA256_DIGEST_SIZE];
        char key[64], hex[SHA256_HEX_SIZE], note[64];
        bool known = false;
        time_t now = time(NULL);
        struct tm tm;
        int r;

        for (size_t i = 0; i < c->n_tiers; i++)
                known = known || streq(c->tiers[i].name, tier);
        if (!known) {
                log_error("There is no [Tier] named '%s' in the configuration", tier);
                return EXIT_NOT_FOUND;
        }
        if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
                return log_error_errno(errno, "getrandom() failed: %m"), EXIT_FAILED;
        strcpy(key, "mg-");
        for (size_t i = 0; i < sizeof(raw); i++)
                snprintf(key + 3 + 2 * i, 3, "%02x", raw[i]);
        if (sha256(key, strlen(key), digest) < 0)
                return log_oom(), EXIT_FAILED;
        sha256_to_hex(digest, hex);
        gmtime_r(&now, &tm);
        strftime(note, sizeof(note), "added %Y-%m-%d by modelgatectl", &tm);
        r = keys_file_add(f, note, digest, tier);
        if (r < 0)
                return log_oom(), EXIT_FAILED;
        r = key_file_write(f);
        if (r < 0)
                return EXIT_FAILED;
        /* the only time the key is shown */
        printf("%s\n", key);
        fprintf(stderr, "key %.12s of tier %s added to %s\n", hex, tier, f->path);
        reload_daemon();
        return EXIT_OK;
}

static int key_remove(KeysFile *f, const char *prefix) {
        size_t matches = 0, match = 0;
        int r;

        if (strlen(prefix) < 8) {
                log_error("Give at least 8 digits of the digest ('modelgatectl key list' shows them)");
                return EXIT_USAGE;
        }
        for (size_t i = 0; i < f->n_keys; i++) {
                char hex[SHA256_HEX_SIZE];

                sha256_to_hex(f->keys[i].digest, hex);
                if (strncasecmp(hex, prefix, strlen(prefix)) == 0) {
                        matches++;
                        match = i;
                }
        }
        if (matches != 1) {
                log_error("%zu keys have a digest starting with '%s'; give a longer prefix", matches,
                          prefix);
                return matches == 0 ? EXIT_NOT_FOUND : EXIT_USAGE;
        }
        keys_file_remove(f, match);
        r = key_file_write(f);
        if (r < 0)
                return EXIT_FAILED;
        fprintf(stderr, "key %s removed from %s\n", prefix, f->path);
        reload_daemon();
        return EXIT_OK;
}

int do_key(int argc, char **argv) {
        _cleanup_(config_done) Config c = {};
        _cleanup_(keys_file_done) KeysFile f = {};
        _cleanup_free_ char *error = NULL;
        _cleanup_close_ int lock = -1;
        const char *verb = argv[0];
        int r;

        r = load_keys_config(&c);
        if (r < 0)
                return EXIT_FAILED;
        /* two writers at once must not lose one's key: the read and the write are one step */
        if (!streq(verb, "list")) {
                lock = state_file_lock(c.access.keys_file);
                if (lock < 0)
                        return log_error_errno(lock, "Cannot lock %s: %m", c.access.keys_file), EXIT_FAILED;
        }
        r = keys_file_read(c.access.keys_file, &f, &error);
        if (r == -ENOENT) /* none yet: the first key added makes it */
                r = keys_file_parse(c.access.keys_file, "", &f, &error);
        if (r == -EBADMSG)
                return log_error("%s", error), EXIT_FAILED;
        if (r < 0)
                return log_error_errno(r, "Cannot read %s: %m", c.access.keys_file), EXIT_FAILED;

        if (streq(verb, "list"))
                return key_list(&f);
        if (streq(verb, "add"))
                return key_add(&c, &f, argv[1]);
        return key_remove(&f, argv[1]);
}

/* "50 req, 200000 tok", "-" without caps */
static const char *caps(char *buf, size_t l, uint64_t requests, uint64_t tokens) {
        if (requests == UINT64_MAX && tokens == UINT64_MAX)
                return "-";
        if (tokens == UINT64_MAX)
                snprintf(buf, l, "%llu req", (unsigned long long)requests);
        else if (requests == UINT64_MAX)
                snprintf(buf, l, "%llu tok", (unsigned long long)tokens);
        else
                snprintf(buf, l, "%llu req, %llu tok", (unsigned long long)requests,
                         (unsigned long long)tokens);
        return buf;
}

static json_object *usage_row(const char *key, const char *tier, const char *day, const uint64_t n[6]) {
        static const char *const names[] = {"Requests",  "TokensIn",      "CachedTokens",
                                            "TokensOut", "DailyRequests", "DailyTokens"};
        json_object *o = json_object_new_object();

        json_object_object_add(o, "Key", json_object_new_string(key));
        json_object_object_add(o, "Tier", json_object_new_string(tier));
        json_object_object_add(o, "Day", json_object_new_string(day));
        for (size_t i = 0; i < 6; i++)
                json_object_object_add(o, names[i], json_object_new_uint64(n[i]));
        /* what DailyTokens= counts (rule:daily-tokens): the prompt's tokens not from the cache, and the
         * generated ones */
        json_object_object_add(o, "CountedTokens",
                               json_object_new_uint64((n[1] > n[2] ? n[1] - n[2] : 0) + n[3]));
        return o;
}

/* rule:key-usage: ListKeyUsage() as a table or as JSON (the bus's values as they are: a cap of
 * 18446744073709551615 is none) */
int do_key_usage(sd_bus *bus, const char *name) {
        _cleanup_(sd_bus_error_free) sd_bus_error e = SD_BUS_ERROR_NULL;
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        json_object *rows = json_object_new_array();
        const char *key, *tier, *day;
        uint64_t n[6];
        int r;

        r = call_manager(bus, "ListKeyUsage", /* start= */ false, &e, &reply);
        if (r >= 0)
                r = sd_bus_message_enter_container(reply, 'a', "(ssstttttt)");
        while (r >= 0 && (r = sd_bus_message_read(reply, "(ssstttttt)", &key, &tier, &day, &n[0], &n[1],
                                                  &n[2], &n[3], &n[4], &n[5])) > 0)
                if (!name || streq(tier, name) || strncasecmp(key, name, strlen(name)) == 0)
                        json_object_array_add(rows, usage_row(key, tier, day, n));
        if (r < 0) {
                json_object_put(rows);
                return report("Cannot read the key usage", &e, r);
        }
        if (arg_json)
                print_json(rows);
        else
                printf("%-16s %-10s %-10s %8s %10s %10s %10s %10s %s\n", "KEY", "TIER", "DAY", "REQUESTS",
                       "TOKENS-IN", "CACHED", "TOKENS-OUT", "COUNTED", "CAP");
        for (size_t i = 0; !arg_json && i < json_object_array_length(rows); i++) {
                json_object *o = json_object_array_get_idx(rows, i);
                char b[64];
#define U(k) (unsigned long long)json_object_get_uint64(json_object_object_get(o, k))
                printf("%-16s %-10s %-10s %8llu %10llu %10llu %10llu %10llu %s\n",
                       json_object_get_string(json_object_object_get(o, "Key")),
                       *json_object_get_string(json_object_object_get(o, "Tier"))
                               ? json_object_get_string(json_object_object_get(o, "Tier"))
                               : "-",
                       json_object_get_string(json_object_object_get(o, "Day")), U("Requests"),
                       U("TokensIn"), U("CachedTokens"), U("TokensOut"), U("CountedTokens"),
                       caps(b, sizeof(b), U("DailyRequests"), U("DailyTokens")));
#undef U
        }
        json_object_put(rows);
        return EXIT_OK;
}
