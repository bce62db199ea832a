/*
 * ahead.c -- the read-ahead thread: runs one job at a time for the reader, which asks for the
 * next minibatch to be made there while its caller works on the one it was handed (reader.c
 * decides what is read ahead, and when a result is taken or dropped).
 *
 * A job is made in tens of microseconds, and a thread woken from sleep starts about as late
 * (later in a VM), so on more than one core both hand-overs spin for a while before they sleep
 * on the condition: the thread waiting for the next ask, and the caller waiting for the job's
 * end. A caller that works longer than the spin (a training step) finds the job done and never
 * waits. The spin adapts to the waits each side has seen: a spin that would end in sleep anyway
 * only takes a core from the loader threads, so each side spins for about twice its recent wait
 * when that is shorter than AHEAD_SPIN_NS, else only briefly (to notice when waits shorten).
 *
 * Memory order: the asker writes the job's inputs, then the phase; the thread reads the phase,
 * then the inputs; the results go back the same way. The phase is a sequentially consistent
 * atomic, and a sleeper registers before its last look at it, so no wake-up is lost.
 */
#include "reader/pipeline.h"

#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#define AHEAD_SPIN_NS 100000
#define AHEAD_PROBE_NS 2000 /* the spin while waits are longer than AHEAD_SPIN_NS */

#if defined(__x86_64__) || defined(__i386__)
#define AHEAD_PAUSE() __builtin_ia32_pause()
#else
#define AHEAD_PAUSE() ((void)0)
#endif

enum { PH_IDLE, PH_ASKED, PH_DONE, PH_QUIT };

struct ctf__ahead {
    void (*run)(void *arg);
    void *arg;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    atomic_int phase;    /* PH_*: set by the asker (ASKED, IDLE, QUIT) and the thread (DONE) */
    atomic_int sleepers; /* threads asleep on cv, or about to be */
    uint64_t spin_ns;    /* AHEAD_SPIN_NS, or 0 on one core (the spin would hold up the
                          * thread it waits for) */
    /* Each side's recent wait (a moving average, ns): the thread's for an ask, the caller's for
     * a job's end. Each is read and written by its own side only. */
    uint64_t wait_ask_ns, wait_done_ns;
};

static void set_phase(ctf__ahead *a, int ph)
{
    atomic_store(&a->phase, ph);
    if (atomic_load(&a->sleepers)) {
        pthread_mutex_lock(&a->mu);
        pthread_cond_broadcast(&a->cv);
        pthread_mutex_unlock(&a->mu);
    }
}

/* How long this side spins, from its recent waits. */
static uint64_t spin_budget(const ctf__ahead *a, uint64_t recent)
{
    if (!a->spin_ns) return 0;
    if (recent >= a->spin_ns) return AHEAD_PROBE_NS;
    return CTF_MAX(CTF_MIN(2 * recent, a->spin_ns), (uint64_t)AHEAD_PROBE_NS);
}

/* Folds one wait into a side's moving average (1/8 of the new one; a wait far longer than the
 * spin counts as twice the spin, so that one long step does not end the spinning for long). */
static void note_wait(uint64_t *recent, uint64_t waited, uint64_t cap)
{
    waited = CTF_MIN(waited, 2 * cap);
    *recent = *recent - *recent / 8 + waited / 8;
}

/* Until the phase is x or y: spinning a while, then asleep. `recent`: this side's average
 * wait. @return : the phase. */
static int await_phase(ctf__ahead *a, int x, int y, uint64_t *recent)
{
    int ph = atomic_load(&a->phase);
    if (ph == x || ph == y) {
        note_wait(recent, 0, a->spin_ns);
        return ph;
    }
    const uint64_t t0 = ctf__now_ns(), budget = spin_budget(a, *recent);
    for (unsigned i = 1; budget; i++) {
        AHEAD_PAUSE();
        ph = atomic_load(&a->phase);
        if (ph == x || ph == y) {
            note_wait(recent, ctf__now_ns() - t0, a->spin_ns);
            return ph;
        }
        if (!(i & 63) && ctf__now_ns() - t0 > budget) break;
    }
    pthread_mutex_lock(&a->mu);
    atomic_fetch_add(&a->sleepers, 1);
    while ((ph = atomic_load(&a->phase)) != x && ph != y) pthread_cond_wait(&a->cv, &a->mu);
    atomic_fetch_sub(&a->sleepers, 1);
    pthread_mutex_unlock(&a->mu);
    note_wait(recent, ctf__now_ns() - t0, a->spin_ns);
    return ph;
}

static void *ahead_main(void *arg)
{
    ctf__ahead *a = arg;
    while (await_phase(a, PH_ASKED, PH_QUIT, &a->wait_ask_ns) == PH_ASKED) {
        a->run(a->arg);
        set_phase(a, PH_DONE);
    }
    return NULL;
}

int ctf__ahead_create(void (*run)(void *arg), void *arg, ctf__ahead **out)
{
    *out = NULL;
    ctf__ahead *a = CTF_CALLOC(1, sizeof *a);
    if (!a) return CTF_ENOMEM;
    a->run = run;
    a->arg = arg;
    a->spin_ns = sysconf(_SC_NPROCESSORS_ONLN) > 1 ? AHEAD_SPIN_NS : 0;
    a->wait_ask_ns = a->wait_done_ns = AHEAD_SPIN_NS / 2; /* spin in full at first */
    atomic_init(&a->phase, PH_IDLE);
    atomic_init(&a->sleepers, 0);
    if (pthread_mutex_init(&a->mu, NULL)) goto fail;
    if (pthread_cond_init(&a->cv, NULL)) goto fail_mu;
    if (pthread_create(&a->thread, NULL, ahead_main, a)) goto fail_cv;
    *out = a;
    return 0;
fail_cv:
    pthread_cond_destroy(&a->cv);
fail_mu:
    pthread_mutex_destroy(&a->mu);
fail:
    CTF_FREE(a);
    return CTF_ENOMEM;
}

void ctf__ahead_ask(ctf__ahead *a) { set_phase(a, PH_ASKED); }

void ctf__ahead_wait(ctf__ahead *a)
{
    if (atomic_load(&a->phase) == PH_IDLE) return;
    await_phase(a, PH_DONE, PH_DONE, &a->wait_done_ns);
    atomic_store(&a->phase, PH_IDLE);
}

void ctf__ahead_free(ctf__ahead *a)
{
    if (!a) return;
    ctf__ahead_wait(a);
    set_phase(a, PH_QUIT);
    pthread_join(a->thread, NULL);
    pthread_cond_destroy(&a->cv);
    pthread_mutex_destroy(&a->mu);
    CTF_FREE(a);
}
