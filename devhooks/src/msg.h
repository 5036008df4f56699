/*
 * One-line messages: the loader's and verifier's errors quote names taken
 * from the object (sections, BTF types, maps, libbpf's own messages about
 * them), and an object may put any byte in a name.  A message is one line
 * whatever the object says: control characters become '?'.
 */
#ifndef MKS_DEVHOOKS_MSG_H
#define MKS_DEVHOOKS_MSG_H

static inline void mks_msg_one_line(char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            *s = '?';
}

#endif
