/* The control file every fault shim reads: a few key=value words that a test replaces (by
 * rename) to change a fault in a running process. Included by each shim's source; the shim
 * builder hashes this header with the source, so a change here rebuilds them all.
 *
 * control_file_read: whether the file changed since `seen` (inode, size or mtime); if so its
 * text (at most cap - 1 bytes, NUL-terminated, "" if it is gone) is in `text` and `seen` is
 * updated. The caller holds its own lock around the call.
 */
#ifndef RIPPLE_CONTROL_FILE_H
#define RIPPLE_CONTROL_FILE_H

#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct control_seen {
    ino_t ino;
    off_t size; /* -1: the file was absent at the last look */
    struct timespec mtime;
};

#define CONTROL_SEEN_NONE {0, -1, {0, 0}}

static int control_file_read(const char *path, struct control_seen *seen, char *text,
                             size_t cap) {
    struct stat st;
    if (stat(path, &st) != 0) {
        int changed = seen->size != -1;
        seen->size = -1;
        text[0] = '\0';
        return changed;
    }
    if (st.st_ino == seen->ino && st.st_size == seen->size &&
        st.st_mtim.tv_sec == seen->mtime.tv_sec && st.st_mtim.tv_nsec == seen->mtime.tv_nsec) {
        return 0;
    }
    ssize_t n = -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        n = read(fd, text, cap - 1);
        close(fd);
    }
    text[n > 0 ? n : 0] = '\0';
    seen->ino = st.st_ino;
    seen->size = st.st_size;
    seen->mtime = st.st_mtim;
    return 1;
}

#endif
