/* What a login for a name that does not exist is given, so that it looks and costs like
 * a real one:
 *   PLAIN   the password is checked against a decoy PBKDF2 hash with the iteration count
 *           of the configured users (an unknown name answered in 0.3 ms, a known one in
 *           57 ms: the names could be enumerated by timing);
 *   SCRAM   server-first carries a salt derived from a server secret and the name (the
 *           same on every try, as a real user's) and the iteration count real users have.
 * The secret lives in data_dir/auth.secret so that decoy salts stay the same across
 * restarts too: a salt that changed with every restart would mark the name as unknown. */
#include "config.h"
#include "auth/auth_int.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int read_secret(const char *path, unsigned char secret[32])
{
    unsigned char buf[33];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? MQD_ENOENT : MQD_EIO;
    ssize_t n = read(fd, buf, sizeof buf);
    close(fd);
    if (n != 32)
        return MQD_EINVAL; /* torn or foreign: replaced below */
    memcpy(secret, buf, 32);
    return 0;
}

/* write temp, fsync, rename, fsync the directory (STYLE rule 7) */
static int write_secret(const char *data_dir, const char *path, const unsigned char secret[32])
{
    char tmp[4096 + 8];
    int rc = MQD_EIO;
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return MQD_EIO;
    bool ok = write(fd, secret, 32) == 32 && fsync(fd) == 0;
    if (close(fd) != 0)
        ok = false;
    if (ok && rename(tmp, path) == 0 && mqd_fsync_dir(data_dir) == 0)
        rc = 0;
    if (rc != 0)
        unlink(tmp);
    return rc;
}

int mqd_auth_secret_load(const char *data_dir, unsigned char secret[32])
{
    char path[4096];
    int n = snprintf(path, sizeof path, "%s/%s", data_dir, MQD_AUTH_SECRET_FILE);
    if (n < 0 || (size_t)n >= sizeof path)
        return MQD_EINVAL;
    int rc = read_secret(path, secret);
    if (rc == 0 || rc == MQD_EIO)
        goto out;
    if (RAND_bytes(secret, 32) != 1)
        return MQD_EIO;
    rc = write_secret(data_dir, path, secret);
out:
    if (rc != 0)
        MQD_ERR("auth", "%s: cannot read or create the server secret", path);
    return rc;
}

/* The iteration count of "pbkdf2-sha256$N$..." or of SCRAM's "N$...", 0 if none. */
static uint32_t iterations_of(const char *v, const char *prefix)
{
    size_t pl = strlen(prefix);
    if (v == NULL || strncmp(v, prefix, pl) != 0)
        return 0;
    char *end = NULL;
    unsigned long n = strtoul(v + pl, &end, 10);
    return end != v + pl && *end == '$' && n <= MQD_CONF_PBKDF2_MAX_ITERATIONS ? (uint32_t)n : 0;
}

int mqd_auth_decoy_setup(mqd_auth_t *a, const mqd_conf_t *conf)
{
    /* the largest count configured: an unknown name is never the fast answer */
    uint32_t pbkdf2 = 0, scram = 0;
    for (size_t i = 0; i < conf->n_users; i++) {
        uint32_t p = iterations_of(conf->users[i].password_hash, "pbkdf2-sha256$");
        uint32_t s = iterations_of(conf->users[i].scram_sha256, "");
        pbkdf2 = p > pbkdf2 ? p : pbkdf2;
        scram = s > scram ? s : scram;
    }
    a->decoy_scram_iterations = scram ? scram : MQD_CONF_SCRAM_ITERATIONS;
    /* random salt and hash: parsing and PBKDF2 cost what a real hash costs, and no
     * password matches it */
    unsigned char rnd[16 + 32];
    char salt64[32], hash64[48];
    if (RAND_bytes(rnd, sizeof rnd) != 1)
        return MQD_EIO;
    EVP_EncodeBlock((unsigned char *)salt64, rnd, 16);
    EVP_EncodeBlock((unsigned char *)hash64, rnd + 16, 32);
    snprintf(a->decoy_hash, sizeof a->decoy_hash, "pbkdf2-sha256$%u$%s$%s",
             pbkdf2 ? pbkdf2 : MQD_CONF_PBKDF2_ITERATIONS, salt64, hash64);
    return 0;
}
