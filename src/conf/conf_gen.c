/* mqd-conf-gen: prints the sample config (`sample`) or the mqd.conf(5) key reference
 * (`man`) from the config table; `make regen-conf` commits its output to etc/ and man/. */
#include "config.h"
#include "conf/conf.h"

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    int rc;
    if (argc != 2 || (strcmp(argv[1], "sample") != 0 && strcmp(argv[1], "man") != 0)) {
        fprintf(stderr, "usage: mqd-conf-gen sample|man\n");
        return 2;
    }
    rc = strcmp(argv[1], "sample") == 0 ? mqd_conf_write_sample(stdout)
                                        : mqd_conf_write_man_keys(stdout);
    if (rc == 0 && fflush(stdout) != 0)
        rc = MQD_EIO;
    return rc == 0 ? 0 : 1;
}
