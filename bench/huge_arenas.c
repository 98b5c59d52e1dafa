/* pymalloc's arenas carved from 2 MiB-aligned regions the kernel is asked to back with
 * transparent huge pages (madvise(MADV_HUGEPAGE)): CPython 3.13's
 * --with-pymalloc-hugepages, for the 3.11 this project runs on. A measuring aid for
 * bench/admission.py --huge-page-arenas (see bench/huge_arenas.py): how much of a large
 * heap's cost is address translation.
 *
 * Arenas are taken from 64 MiB regions, one after the other; a freed arena is kept on a
 * free list for the next request, never given back to the system. Arenas made before
 * install() (and any request of another size) stay the previous allocator's. pymalloc
 * calls these with the GIL held, so there are no locks. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <sys/mman.h>

#define HUGE_PAGE ((size_t)2 << 20)
#define REGION ((size_t)64 << 20)
#define MAX_REGIONS 4096 /* 256 GiB */

typedef struct Freed { struct Freed *next; } Freed;

static PyObjectArenaAllocator previous;
static char *regions[MAX_REGIONS];
static size_t region_count;
static char *next_arena, *region_end;
static Freed *freed;
static size_t arena_size;
static size_t handed_out, most_handed_out;

static int ours(const char *p) {
    for (size_t i = 0; i < region_count; i++)
        if (p >= regions[i] && p < regions[i] + REGION) return 1;
    return 0;
}

static int new_region(void) {
    if (region_count == MAX_REGIONS) return 0;
    char *raw = mmap(NULL, REGION + HUGE_PAGE, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED) return 0;
    char *start = (char *)(((uintptr_t)raw + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    char *end = raw + REGION + HUGE_PAGE;
    if (start > raw) munmap(raw, (size_t)(start - raw));
    if (end > start + REGION) munmap(start + REGION, (size_t)(end - (start + REGION)));
    madvise(start, REGION, MADV_HUGEPAGE); /* advice: without huge pages it still works */
    regions[region_count++] = start;
    next_arena = start;
    region_end = start + REGION;
    return 1;
}

static void *counted(void *arena) {
    if (++handed_out > most_handed_out) most_handed_out = handed_out;
    return arena;
}

static void *arena_alloc(void *ctx, size_t size) {
    (void)ctx;
    if (arena_size == 0) arena_size = size;
    if (size != arena_size || size > REGION) return previous.alloc(previous.ctx, size);
    if (freed) {
        Freed *arena = freed;
        freed = arena->next;
        return counted(arena);
    }
    if ((size_t)(region_end - next_arena) < size && !new_region())
        return previous.alloc(previous.ctx, size);
    void *arena = next_arena;
    next_arena += size;
    return counted(arena);
}

static void arena_free(void *ctx, void *ptr, size_t size) {
    (void)ctx;
    if (!ours(ptr)) {
        previous.free(previous.ctx, ptr, size);
        return;
    }
    Freed *arena = ptr;
    arena->next = freed;
    freed = arena;
    handed_out--;
}

static PyObject *install(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    if (previous.alloc == NULL) {
        PyObjectArenaAllocator mine = {NULL, arena_alloc, arena_free};
        PyObject_GetArenaAllocator(&previous);
        PyObject_SetArenaAllocator(&mine);
    }
    Py_RETURN_NONE;
}

static PyObject *stats(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    return Py_BuildValue("{s:n,s:n,s:n,s:n}", "arenas", (Py_ssize_t)handed_out, "most_arenas",
                         (Py_ssize_t)most_handed_out, "regions", (Py_ssize_t)region_count,
                         "region_bytes", (Py_ssize_t)REGION);
}

static PyMethodDef methods[] = {
    {"install", install, METH_NOARGS, "Take pymalloc's new arenas from huge-page regions."},
    {"stats", stats, METH_NOARGS, "Arenas handed out now and at most, regions reserved, a region's size."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_huge_arenas", NULL, -1, methods};

PyMODINIT_FUNC PyInit__huge_arenas(void) { return PyModule_Create(&module); }
