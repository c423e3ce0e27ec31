// LD_PRELOAD shim for the power-cut runs: FUSE never sees a syncfs(2), so before the real call this asks the
// power-cut file system (its control socket in $POWERCUT_CONTROL) to do what syncfs does on a real one: make every
// file's data and every name durable. A dead file system answers "dead", and the call fails with EIO.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int syncfs(int descriptor) {
    const char *control = getenv("POWERCUT_CONTROL");
    if (control != NULL && strlen(control) < sizeof(((struct sockaddr_un *)0)->sun_path)) {
        int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_un address = {.sun_family = AF_UNIX};
        strcpy(address.sun_path, control);
        char answer[16] = {0};
        if (sock < 0 || connect(sock, (struct sockaddr *)&address, sizeof address) != 0
            || write(sock, "syncfs\n", 7) != 7 || read(sock, answer, sizeof answer - 1) <= 0) {
            if (sock >= 0) close(sock);
            errno = EIO;
            return -1;
        }
        close(sock);
        if (strncmp(answer, "synced", 6) != 0) {
            errno = EIO;
            return -1;
        }
    }
    int (*real)(int) = (int (*)(int))dlsym(RTLD_NEXT, "syncfs");
    return real(descriptor);
}
