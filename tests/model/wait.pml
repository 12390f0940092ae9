/*
 * tests/model/wait.pml -- the wait protocol of the lease kinds (Lock,
 * FencedLock, RwLock, Semaphore): waiters queued in Redis, woken or
 * handed the lease by the release (collection/wake.h). docs/model.md
 * says what is modelled and how; tests/model/run.sh runs it.
 *
 * One model for every kind, chosen with -D:
 *   KIND   1 Lock, 2 FencedLock, 3 RwLock, 4 Semaphore
 *   FAIR   1: no barging (Lock, RwLock)
 *   DEFECT_1, DEFECT_2, DEFECT_3, DEFECT_5, DEFECT_S: a known defect put
 *          back (docs/model.md); the run must then fail.
 *
 * Time is an abstract clock `now` (ticks). Every server script, every
 * pop and every client step is one atomic step at the current tick; the
 * clock advances only when no process must act first (due[]), so a live,
 * punctual client acts in the tick its reply arrives, a late one may act
 * any tick later. Properties are assertions (see docs/model.md, P1..P6).
 */

#define LOCK 1
#define FENCED 2
#define RWLOCK 3
#define SEM 4

#ifndef KIND
#define KIND LOCK
#endif
#ifndef FAIR
#define FAIR 0
#endif
#ifndef T
#define T 10            /* lease TTL */
#endif
#ifndef R
#define R 2             /* longest sleep between renewals */
#endif
#ifndef G
#define G 2             /* grace: a registration lasts sleep + G */
#endif
#ifndef TAU
#define TAU 1           /* how late the server's BLPOP timer may fire */
#endif
#define B (R + G + TAU)
#ifndef MAXT
#define MAXT 16         /* the clock stops here */
#endif
#ifndef FAULTS
#define FAULTS 1        /* crash, late, lost reply, close: at most this many per run */
#endif
#ifndef NPERM
#define NPERM 2         /* Semaphore permits */
#endif
#ifndef READERS
#define READERS 2       /* RwLock: bit i set = client i reads */
#endif
#ifndef HOLDMAX
#define HOLDMAX 1       /* a live holder releases within this many ticks */
#endif
#ifndef SMAX
#define SMAX 2          /* client 1 starts at a tick in 0..SMAX (client 0 at 0) */
#endif
#ifndef SMAX2
#define SMAX2 11        /* client 2 (a newcomer too) at a tick in 0..SMAX2 */
#endif
#ifndef DLS
#define DLS 3           /* a waiter's deadline: start + DLS or start + DLL */
#endif
#ifndef DLL
#define DLL 12
#endif
#ifndef NCL
#define NCL 3           /* clients that run (2 or 3) */
#endif
#ifndef FAULTY
#define FAULTY 3        /* bit i set: client i may fault (client 2, a waiter, never does) */
#endif
#ifndef FK
#define FK 15           /* fault kinds: 1 crash, 2 late, 4 lost reply, 8 close */
#endif

/* REACH=n: fail when event n happens (run.sh: each must be reachable,
 * so that the properties are not checked on an empty model) */
#ifndef REACH
#define REACH 0
#endif
#define REACHED(n) assert(REACH != n)

#define NC 3
#define INF 255
#define NONE 255
#define LOCKISH (KIND == LOCK || KIND == FENCED)

/* client states */
#define IDLE 0
#define WAITING 1       /* inside the acquire, not returned */
#define HOLD 2          /* returned holding (told so), not released */
#define DONE 3          /* returned (not holding) or released */
#define DEAD 4          /* crashed */
#define CLOSED 5        /* its handle closed */
/* reports */
#define R_NONE 0
#define R_ACQ 1
#define R_NOT 2         /* not acquired, or an error "not sent" */
#define R_UNK 3         /* WK_EUNKNOWN */
/* a list: L[] */
#define L_EMPTY 0
#define L_WAKE 1        /* '1' */
#define L_NOTICE 2      /* 'h<end>' */

byte now;

/* ---- server state ---- */
byte lend[NC];          /* end of client k's lease: it runs while lend[k] > now */
bit  lw[NC];            /* that lease is the writer key's (Lock, FencedLock: always) */
byte fence;             /* FencedLock counter */
byte lf[NC];            /* fence of k's lease */
byte q[NC];             /* the queue, oldest first */
byte qn;
byte e[NC];             /* registration end, 0: none */
byte L[NC];             /* k's list */
byte hc[NC];            /* the claim end written in k's notice */
byte nfe[NC];           /* the fence written in k's notice */
bit  blk[NC];           /* a BLPOP of k is blocked on the server */
byte pe[NC];            /* its timer may fire from this tick on (by pe + TAU) */
byte rv[NC];            /* what the last pop of k returned (L_* ; L_EMPTY: timeout) */

/* ---- clients and ghosts ---- */
byte cs[NC];            /* client state */
byte rep[NC];           /* what it reported */
byte due[NC];           /* it must act before the clock passes this tick */
bit  pw[NC];            /* the client waits for its pop's reply */
bit  late[NC];          /* delayed right now */
bit  el[NC];            /* was late during this acquire */
bit  tk[NC];            /* k's running lease was taken up (its notice popped, or a take) */
byte hT[NC];            /* when k's lease was handed (while not taken up) */
byte gend[NC];          /* holder's lease end as the server had it when k was told */
byte gfence;            /* last fence granted */
byte ws = NONE;         /* the item is wasted since (P4, P5) */
byte nf;                /* faults spent */

/* scratch (reset to 0 at the end of each step) */
byte qx_, px_, pf_, hd_, ar_, as_, sx_, ux_, gx_;
short x_;

#define RUN(k)  (lend[k] > now)
#define WRUN(k) (RUN(k) && lw[k])
#define RRUN(k) (RUN(k) && !lw[k])
#define NRUN  (RUN(0) + RUN(1) + RUN(2))
#define NWRUN (WRUN(0) + WRUN(1) + WRUN(2))
#define NRRUN (RRUN(0) + RRUN(1) + RRUN(2))
#define INQ(k) ((qn > 0 && q[0] == k) || (qn > 1 && q[1] == k) || (qn > 2 && q[2] == k))
#define RD(k) (KIND == RWLOCK && ((READERS >> (k)) & 1))
/* a live, punctual waiter: inside the acquire, never late in it */
#define LIVEW(k) (cs[k] == WAITING && !el[k])
#define ANYLIVEW (LIVEW(0) || LIVEW(1) || LIVEW(2))
/* taken-up running leases (in use by a client that took them) */
#define USED(k) (RUN(k) && tk[k])
#define NUSED (USED(0) + USED(1) + USED(2))
#if KIND == SEM
#define AVAIL (NUSED < NPERM)
#else
#define AVAIL (NUSED == 0)
#endif
/* a client believes it holds, and the server said so when it was told */
#define BEL(k) (cs[k] == HOLD && gend[k] > now)
#define BELW(k) (BEL(k) && (KIND != RWLOCK || !RD(k)))
#define BELR(k) (BEL(k) && RD(k))

/* ------------------------------------------------------------------ */
/* queue                                                              */

/* remove k (a variable, not q[..]) from the queue */
inline qrem(k) {
  qx_ = 0;
  do
  :: qx_ < qn && q[qx_] != k -> qx_++
  :: else -> break
  od;
  if
  :: qx_ < qn ->
     do
     :: qx_ + 1 < qn -> q[qx_] = q[qx_ + 1]; qx_++
     :: else -> break
     od;
     qn--; q[qn] = 0
  :: else -> skip
  fi;
  qx_ = 0
}

/* a push into k's list is popped at once by k's blocked BLPOP */
inline deliver(k) {
  if
  :: blk[k] && L[k] != L_EMPTY ->
     blk[k] = 0; rv[k] = L[k];
     if :: L[k] == L_NOTICE -> tk[k] = 1; hT[k] = 0; REACHED(4);
           if :: cs[k] == CLOSED -> REACHED(7) :: else -> skip fi
     :: else -> skip fi;
     L[k] = L_EMPTY; hc[k] = 0;
     if :: pw[k] && !late[k] -> due[k] = now :: else -> skip fi
  :: else -> skip
  fi
}

/* wake the head: '1' into its list unless one is there (wk_poke) */
inline poke() {
  if
  :: qn > 0 && L[q[0]] == L_EMPTY -> hd_ = q[0]; L[hd_] = L_WAKE; deliver(hd_); hd_ = 0
  :: else -> skip
  fi
}

/* a lease taken from a waiter that never took it up (wk_revoke) */
inline revoke(k) {
  printf("MSC: t=%d c%d's lease goes\n", now, k);
  REACHED(1);
  lend[k] = 0; lw[k] = 0; tk[k] = 0; hT[k] = 0
}

/* wk_prune: every registration that has ended leaves q and e, its list
 * goes; an unpopped notice in it: the lease handed to it is revoked and
 * the head is woken. */
inline prune() {
  px_ = 0; pf_ = 0;
  do
  :: px_ < NC ->
     if
     :: e[px_] != 0 && e[px_] <= now ->
        /* P3: a live, punctual waiter never loses its place */
        assert(!LIVEW(px_));
        printf("MSC: t=%d prune c%d (registration ended %d)\n", now, px_, e[px_]);
        qrem(px_);
        e[px_] = 0;
        if :: L[px_] == L_NOTICE && RUN(px_) -> revoke(px_); pf_ = 1 :: else -> skip fi;
        L[px_] = L_EMPTY; hc[px_] = 0
     :: else -> skip
     fi;
     px_++
  :: else -> break
  od;
  /* Lock, FencedLock: a handed waiter is not in e, so no revoke here */
  assert(!(pf_ && LOCKISH));
  if :: pf_ -> poke() :: else -> skip fi;
  px_ = 0; pf_ = 0
}

/* SET the lock / writer key for k (the old value goes) */
inline setw(k) {
  if :: lw[0] -> lend[0] = 0; lw[0] = 0; tk[0] = 0; hT[0] = 0 :: else -> skip fi;
  if :: lw[1] -> lend[1] = 0; lw[1] = 0; tk[1] = 0; hT[1] = 0 :: else -> skip fi;
  if :: lw[2] -> lend[2] = 0; lw[2] = 0; tk[2] = 0; hT[2] = 0 :: else -> skip fi;
  lend[k] = now + T; lw[k] = 1
}

/* a lease is granted to k: FencedLock draws the next fence (P2) */
inline grant_fence(k) {
#if KIND == FENCED
  fence++; lf[k] = fence;
  assert(fence > gfence); gfence = fence
#else
  skip
#endif
}

/* the notice to k (the lease is written already): k leaves q, its list
 * holds only 'h<claim end>' */
inline notice(k, claim) {
  qrem(k);
  L[k] = L_NOTICE; hc[k] = claim; nfe[k] = lf[k];
  tk[k] = 0; hT[k] = now;
  ws = NONE;            /* P5 counts from each handoff */
  deliver(k)
}

/* P3 (fair): a take by k passes no live waiter queued ahead of it */
inline fifo_check(k) {
#if FAIR
  assert(!(qn > 0 && q[0] != k && LIVEW(q[0])));
  assert(!(qn > 1 && q[0] != k && q[1] != k && LIVEW(q[1])));
#else
  skip
#endif
}

/* ------------------------------------------------------------------ */
/* handing over                                                       */

#if LOCKISH
/* wk_hand: prune, then the lease to the head (hd_), or hd_ = NONE */
inline hand() {
  prune();
  if
  :: qn > 0 ->
     hd_ = q[0];
     setw(hd_);
     grant_fence(hd_);
     sx_ = (e[hd_] != 0 -> e[hd_] : now + G);
     e[hd_] = 0;
     printf("MSC: t=%d hand lease to c%d, claim end %d\n", now, hd_, sx_);
     notice(hd_, sx_);
     sx_ = 0
  :: else -> hd_ = NONE
  fi
}

/* the lease of holder h has been freed by h: hand it on or leave it free */
inline pass_on(h) {
  hand();
  if :: hd_ == NONE -> revoke(h) :: else -> skip fi;
  hd_ = 0
}

/* wk_unclaimed: the holder (not `id`) was handed the lease and its notice
 * is unpopped with its claim end passed: revoked, handed to the head */
inline unclaimed(id) {
  ux_ = (RUN(0) -> 0 : (RUN(1) -> 1 : (RUN(2) -> 2 : NONE)));
  if
  :: ux_ != NONE && ux_ != id && L[ux_] == L_NOTICE && hc[ux_] <= now ->
     L[ux_] = L_EMPTY; hc[ux_] = 0;
     printf("MSC: t=%d c%d's notice unclaimed: revoked\n", now, ux_);
     pass_on(ux_)
  :: else -> skip
  fi;
  ux_ = 0
}
#else
/* RwLock, Semaphore: give k a lease of its own (k keeps its registration) */
inline give(k) {
  gx_ = e[k];
  printf("MSC: t=%d hand lease to c%d, claim end %d\n", now, k, gx_);
  notice(k, gx_);
  gx_ = 0
}
#endif

#if KIND == RWLOCK
/* rw_hand: from the releasing writer (wr = 1) or the last reader, hand the
 * item to the head: a writer if no other reader runs; the readers at the
 * head up to the next writer. Sets pf_ = 1 if it handed. */
inline rw_hand(mine, wr) {
  prune();
  pf_ = 0;
  if
  :: qn > 0 && e[q[0]] == 0 -> poke()
  :: qn > 0 && e[q[0]] != 0 && !RD(q[0]) ->
     if
     :: NRRUN - (!wr && RRUN(mine)) == 0 ->
        hd_ = q[0]; setw(hd_); give(hd_); pf_ = 1; hd_ = 0
     :: else -> skip
     fi
  :: qn > 0 && e[q[0]] != 0 && RD(q[0]) ->
     if :: wr -> revoke(mine) :: else -> skip fi;
     do
     :: qn > 0 && e[q[0]] != 0 && RD(q[0]) ->
        hd_ = q[0]; lend[hd_] = now + T; lw[hd_] = 0; give(hd_); hd_ = 0
     :: else -> break
     od;
     pf_ = 1
  :: else -> skip
  fi
}
#endif

#if KIND == SEM
/* sem_hand: every free place (mine not counted) to the heads in turn */
inline sem_hand(mine) {
  prune();
  sx_ = NPERM - NRUN + RUN(mine);
  do
  :: sx_ > 0 && qn > 0 && e[q[0]] == 0 -> poke(); break
  :: sx_ > 0 && qn > 0 && e[q[0]] != 0 ->
     hd_ = q[0]; lend[hd_] = now + T; lw[hd_] = 0;
     give(hd_); sx_--; hd_ = 0
  :: else -> break
  od;
  sx_ = 0
}
#endif

/* wk_wake: prune, then wake the head */
inline wake() {
  prune(); poke()
}

/* ------------------------------------------------------------------ */
/* scripts                                                            */

/* release(i) */
inline release(i) {
#if LOCKISH
#ifdef DEFECT_S
  /* DEFECT_S: hands over without checking that i holds */
  if
  :: true ->
#else
  if
  :: RUN(i) ->
#endif
     hand();
     if :: hd_ == NONE -> if :: RUN(i) -> revoke(i) :: else -> skip fi :: else -> skip fi;
     hd_ = 0
  :: else -> skip
  fi
#elif KIND == RWLOCK
  if
  :: WRUN(i) ->
     if :: qn > 0 -> rw_hand(i, 1) :: else -> pf_ = 0 fi;
     if :: !pf_ && RUN(i) -> revoke(i) :: else -> skip fi;
     pf_ = 0
  :: RRUN(i) ->
     if :: qn > 0 && NRRUN == 1 -> rw_hand(i, 0) :: else -> skip fi;
     pf_ = 0;
     revoke(i)
  :: else -> skip
  fi
#else
  if
  :: RUN(i) -> if :: qn > 0 -> sem_hand(i) :: else -> skip fi; revoke(i)
  :: else -> skip
  fi
#endif
}

/* leave(i): a lease handed to i is passed on; else i leaves the queue,
 * waking the next head if it was the head or had a wake-up pending */
inline leave(i) {
  if
  :: RUN(i) ->
     L[i] = L_EMPTY; hc[i] = 0; qrem(i); e[i] = 0;
#if LOCKISH
     pass_on(i)
#elif KIND == RWLOCK
     if
     :: WRUN(i) -> rw_hand(i, 1); if :: !pf_ && RUN(i) -> revoke(i) :: else -> skip fi
     :: else -> if :: NRRUN == 1 -> rw_hand(i, 0) :: else -> skip fi; revoke(i)
     fi;
     pf_ = 0
#else
     sem_hand(i); revoke(i)
#endif
  :: else ->
     sx_ = ((qn > 0 && q[0] == i) || L[i] != L_EMPTY);
     qrem(i); e[i] = 0; L[i] = L_EMPTY; hc[i] = 0;
     if :: sx_ -> sx_ = 0; wake() :: else -> skip fi
  fi
}

/* whether i may take the item now (after the prune) */
#if LOCKISH
#define FREE_FOR(i) (NRUN == 0)
#elif KIND == RWLOCK
#define FREE_FOR(i) (RD(i) -> NWRUN == 0 : NRUN == 0)
#else
#define FREE_FOR(i) (NRUN < NPERM)
#endif
#if FAIR
#define ALLOWED(i) (qn == 0 || q[0] == i)
#else
#define ALLOWED(i) true
#endif

/* i takes the item (free and allowed) */
inline take(i) {
  fifo_check(i);
#if LOCKISH
  setw(i); grant_fence(i);
#elif KIND == RWLOCK
  if :: RD(i) -> lend[i] = now + T; lw[i] = 0 :: else -> setw(i) fi;
#else
  lend[i] = now + T; lw[i] = 0;
#endif
  tk[i] = 1; hT[i] = 0
}

/* wk_took: i leaves q and e, its list goes; readers and permits wake the
 * next head (who may fit too) */
inline took(i) {
  qrem(i); e[i] = 0; L[i] = L_EMPTY; hc[i] = 0;
#if KIND == SEM
  wake()
#elif KIND == RWLOCK
  if :: RD(i) -> wake() :: else -> skip fi
#else
  skip
#endif
}

/* a plain try (id not waiting): the revocations, then take if free
 * (fair: only if nobody waits). ar_ = 1 if taken. */
inline plain_try(i) {
  prune();
#if LOCKISH
  unclaimed(NONE);
#endif
  /* P5: a lease handed B ago and never taken up is available now */
  assert(!(RUN(0) && !tk[0] && hT[0] + B <= now));
  assert(!(RUN(1) && !tk[1] && hT[1] + B <= now));
  assert(!(RUN(2) && !tk[2] && hT[2] + B <= now));
#if FAIR
  if :: FREE_FOR(i) && qn > 0 -> REACHED(3) :: else -> skip fi;
  if :: FREE_FOR(i) && qn == 0 -> take(i); ar_ = 1 :: else -> ar_ = 0 fi
#else
  if :: FREE_FOR(i) -> take(i); ar_ = 1 :: else -> ar_ = 0 fi
#endif
}

/* how long the head i may sleep (x_, < 0: no bound) */
inline head_bound(i) {
  x_ = -1;
#if LOCKISH
  ux_ = (RUN(0) -> 0 : (RUN(1) -> 1 : (RUN(2) -> 2 : NONE)));
  if
  :: ux_ != NONE && L[ux_] == L_NOTICE ->
#if defined(DEFECT_1) || defined(DEFECT_1R)
     x_ = lend[ux_] - now     /* DEFECT_1: the holder's remaining lease */
#else
     x_ = hc[ux_] - now       /* until the notice's claim end */
#endif
  :: ux_ != NONE && L[ux_] != L_NOTICE -> x_ = lend[ux_] - now
  :: else -> skip
  fi;
  ux_ = 0
#else
  /* the leases in the way, then wk_bound_handed */
  ux_ = 0;
  do
  :: ux_ < NC ->
     if
#if KIND == RWLOCK
     :: RUN(ux_) && (lw[ux_] || !RD(i)) && lend[ux_] - now > x_ -> x_ = lend[ux_] - now
#else
     :: RUN(ux_) && (x_ < 0 || lend[ux_] - now < x_) -> x_ = lend[ux_] - now
#endif
     :: else -> skip
     fi;
     ux_++
  :: else -> break
  od;
  ux_ = 0;
  do
  :: ux_ < NC ->
     if
     :: e[ux_] != 0 && !INQ(ux_) && (x_ < 0 || e[ux_] - now < x_) -> x_ = e[ux_] - now
     :: else -> skip
     fi;
     ux_++
  :: else -> break
  od;
  ux_ = 0
#endif
}

/* wk_park: join the tail (or keep the place), sleep as_ ticks; the
 * registration lasts sleep + G */
inline park(i, cap) {
  if :: !INQ(i) -> q[qn] = i; qn++ :: else -> skip fi;
  if
  :: q[0] == i -> head_bound(i)
  :: else ->
     /* until the earliest registration of a waiter ahead ends */
     x_ = -1; ux_ = 0;
     do
     :: q[ux_] != i ->
        if :: e[q[ux_]] != 0 && (x_ < 0 || e[q[ux_]] - now < x_) -> x_ = e[q[ux_]] - now
        :: else -> skip fi;
        ux_++
     :: else -> break
     od;
     ux_ = 0
  fi;
#if defined(DEFECT_1) && LOCKISH
  /* the old head behind a handed lease: no R */
  if
  :: q[0] == i && (L[0] == L_NOTICE && RUN(0) || L[1] == L_NOTICE && RUN(1) || L[2] == L_NOTICE && RUN(2)) ->
     as_ = cap
  :: else -> as_ = (cap < R -> cap : R)
  fi;
#elif defined(DEFECT_2)
  as_ = cap;             /* the cap is min(deadline, T): no R */
#else
  as_ = (cap < R -> cap : R);
#endif
  if :: x_ >= 0 && x_ < as_ -> as_ = x_ :: else -> skip fi;
  if :: as_ < 1 -> as_ = 1 :: else -> skip fi;
  e[i] = now + as_ + G;
  printf("MSC: t=%d c%d parks: sleep %d, registration ends %d, queue %d %d %d (n %d)\n", now, i, as_, e[i], q[0], q[1], q[2], qn);
  x_ = 0
}

/* attempt(i): ar_ = 1 acquired, 0 parked (as_ the sleep), 2 left
 * (final: cap 0). left: ticks to the deadline. */
inline attempt(i, left, final) {
  prune();
#if LOCKISH && !defined(NO_ATTEMPT_UNCLAIMED)
  unclaimed(i);
#endif
  if
  :: RUN(i) ->                /* handed while it was not popping: its own */
     REACHED(5);
     took(i); tk[i] = 1; hT[i] = 0; ar_ = 1
  :: !RUN(i) && FREE_FOR(i) && ALLOWED(i) ->
     REACHED(2);
     take(i); took(i); ar_ = 1
  :: else ->
#ifdef DEFECT_3
     if
     :: final -> park(i, 1); ar_ = 0   /* DEFECT_3: the old last attempt parks */
     :: else ->
#else
     if
     :: final -> leave(i); ar_ = 2
     :: else ->
#endif
#if defined(DEFECT_1) || defined(DEFECT_2)
        park(i, (left < T -> left : T));
#else
        park(i, (left < R -> left : R));
#endif
        ar_ = 0
     fi
  fi
}

/* ------------------------------------------------------------------ */
/* monitors                                                           */

/* every state after a step */
inline check() {
  /* P1: at most one holder (N permits; never a reader beside a writer) */
#if KIND == SEM
  assert(BEL(0) + BEL(1) + BEL(2) <= NPERM);
#elif KIND == RWLOCK
  assert(BELW(0) + BELW(1) + BELW(2) <= 1);
  assert(!(BELW(0) + BELW(1) + BELW(2) > 0 && BELR(0) + BELR(1) + BELR(2) > 0));
  assert(!(NWRUN > 0 && NRRUN > 0));
#else
  assert(BEL(0) + BEL(1) + BEL(2) <= 1);
#endif
  /* P1: a holder's lease is not taken away (the server agrees) */
  assert(!BEL(0) || RUN(0)); assert(!BEL(1) || RUN(1)); assert(!BEL(2) || RUN(2));
  /* P6: "not acquired" never holds, is never handed the lease after */
  assert(rep[0] != R_NOT || (!RUN(0) && L[0] != L_NOTICE));
  assert(rep[1] != R_NOT || (!RUN(1) && L[1] != L_NOTICE));
  assert(rep[2] != R_NOT || (!RUN(2) && L[2] != L_NOTICE))
}

/* before each tick: P4 (no lost wake-up) and P5 (no stranding): while
 * the item is available (no lease in use; a permit free) and a live,
 * punctual waiter waits, someone takes it within B ticks (of the
 * handoff, after a handoff to a waiter that does not take it up) */
inline tick_monitor() {
  if
  :: AVAIL && ANYLIVEW ->
     if :: ws == NONE -> ws = now :: else -> skip fi;
     assert(now < ws + B)
  :: else -> ws = NONE
  fi
}

/* at each tick: leases that end go (their notice list with them) */
inline expire(k) {
  if
  :: lend[k] != 0 && lend[k] <= now ->
     lend[k] = 0; lw[k] = 0; tk[k] = 0; hT[k] = 0;
     if :: L[k] == L_NOTICE -> L[k] = L_EMPTY; hc[k] = 0 :: else -> skip fi
  :: else -> skip
  fi;
  if :: gend[k] != 0 && gend[k] <= now -> gend[k] = 0 :: else -> skip fi
}

#define MUSTACT(k) (due[k] <= now || (blk[k] && now >= pe[k] + TAU))
#define CANTICK (!MUSTACT(0) && !MUSTACT(1) && !MUSTACT(2))

active proctype clock() {
end_clock:
  do
  :: d_step { now < MAXT && CANTICK ->
       tick_monitor();
       now++;
       expire(0); expire(1); expire(2);
       check() }
  /* the server's BLPOP timer */
  :: d_step { blk[0] && now >= pe[0] -> blk[0] = 0; rv[0] = L_EMPTY;
       if :: pw[0] && !late[0] -> due[0] = now :: else -> skip fi }
  :: d_step { blk[1] && now >= pe[1] -> blk[1] = 0; rv[1] = L_EMPTY;
       if :: pw[1] && !late[1] -> due[1] = now :: else -> skip fi }
  :: d_step { blk[2] && now >= pe[2] -> blk[2] = 0; rv[2] = L_EMPTY;
       if :: pw[2] && !late[2] -> due[2] = now :: else -> skip fi }
  od
}

/* nothing can move before the clock's end: a deadlock of the model */
active proctype watchdog() {
end_watch:
  timeout -> assert(now >= MAXT || (cs[0] >= DONE && cs[1] >= DONE && cs[2] >= DONE))
}

/* ------------------------------------------------------------------ */
/* a client: one acquire (plain try, then the wait), hold, release     */

/* told it holds */
inline acquired(i, sent) {
  printf("MSC: t=%d c%d returns: ACQUIRED (lease ends %d, fence %d)\n", now, i, lend[i], lf[i]);
  cs[i] = HOLD; rep[i] = R_ACQ;
  assert(RUN(i) || late[i] || el[i]);
#ifdef BELIEF_FROM_SEND
  /* the client counts its lease from the send of the request that got it */
  gend[i] = sent + T;
#else
  gend[i] = (RUN(i) -> lend[i] : 0);
#endif
  due[i] = now + HOLDMAX
}

/* a fault of the client, at most FAULTS per run */
#define CANFAULT (nf < FAULTS && ((FAULTY >> i) & 1))
#define CRASH (CANFAULT && (FK & 1))
#define LATE (CANFAULT && (FK & 2))
#define LOST (CANFAULT && (FK & 4))
#define CLOSE (CANFAULT && (FK & 8))

/* between two steps of a waiter: it may crash, be late, or its handle
 * may close (then: WK_EUNKNOWN if it may hold, a registration that may be
 * handed the lease; else "not acquired") */
inline between() {
  if
  :: skip
  :: atomic { CRASH -> nf++; printf("MSC: t=%d c%d CRASHES\n", now, i);
       cs[i] = DEAD; due[i] = INF; el[i] = 1; goto fin }
  :: atomic { LATE -> nf++; printf("MSC: t=%d c%d is LATE\n", now, i);
       late[i] = 1; el[i] = 1; due[i] = INF; lt = now };
     atomic { now > lt -> printf("MSC: t=%d c%d resumes\n", now, i);
       late[i] = 0; due[i] = now; lt = 0 }
  :: atomic { CLOSE -> nf++;
       rep[i] = ((e[i] != 0 || INQ(i) || RUN(i)) -> R_UNK : R_NOT);
       printf("MSC: t=%d c%d's handle CLOSES between steps: reports %d (2 not acquired, 3 UNKNOWN)\n", now, i, rep[i]);
       cs[i] = CLOSED; due[i] = INF; el[i] = 1; check(); goto fin }
  fi
}

proctype client(byte i) {
  byte dl, s, lt;
#ifdef BELIEF_FROM_SEND
  byte ps;              /* when its pop was sent */
#define PS ps
#define PS_CLEAR ps = 0
#else
#define PS now
#define PS_CLEAR skip
#endif

  /* start at any tick in 0..SMAX (client 0 first, at 0), and the plain try */
  atomic {
    i == 0 || cs[0] != IDLE ->
    cs[i] = WAITING;
    if :: i == 0 -> dl = now + DLL
    :: i != 0 -> dl = now + DLS
    :: i != 0 -> dl = now + DLL
    fi;
    due[i] = now;
    if
    :: LOST -> nf++;                          /* its reply lost: ran or not */
       if :: plain_try(i) :: skip fi;
       printf("MSC: t=%d c%d plain try, reply LOST: reports UNKNOWN\n", now, i);
       ar_ = 0; rep[i] = R_UNK; cs[i] = DONE; due[i] = INF; check(); goto fin
    :: plain_try(i)
    fi;
    printf("MSC: t=%d c%d plain try: %d (deadline %d)\n", now, i, ar_, dl);
    if :: ar_ == 1 -> ar_ = 0; acquired(i, now); check(); goto holding
    :: else -> check()
    fi
  };

wait:
  between();
  /* an attempt, or the final one at (or past) the deadline */
  atomic {
    if
    :: LOST -> nf++;                          /* its reply lost: ran or not */
       if :: attempt(i, dl - now, now >= dl) :: skip fi;
       printf("MSC: t=%d c%d attempt, reply LOST: reports UNKNOWN\n", now, i);
       ar_ = 0; as_ = 0; rep[i] = R_UNK; cs[i] = DONE; due[i] = INF; check(); goto fin
    :: attempt(i, dl - now, now >= dl);
       printf("MSC: t=%d c%d attempt (final %d): %d (1 acquired, 0 parked, 2 left)\n", now, i, now >= dl, ar_)
    fi;
    if
    :: ar_ == 1 -> ar_ = 0; as_ = 0; acquired(i, now); check(); goto holding
    :: ar_ == 2 -> ar_ = 0; as_ = 0; rep[i] = R_NOT; cs[i] = DONE; due[i] = INF;
       printf("MSC: t=%d c%d returns: not acquired\n", now, i);
       check(); goto fin
#ifdef DEFECT_3
    :: ar_ == 0 && now >= dl ->
       /* the old give_up: leaves only if not late past the acquire's end */
       as_ = 0;
       if :: now <= dl -> leave(i) :: else -> skip fi;
       printf("MSC: t=%d c%d returns: not acquired (left the queue: %d)\n", now, i, now <= dl);
       rep[i] = R_NOT; cs[i] = DONE; due[i] = INF; check(); goto fin
#endif
    :: else -> s = as_; as_ = 0; check()
    fi
  };
  between();
  if
  :: atomic { now >= dl -> goto wait }       /* at the deadline: the final attempt */
  :: atomic { now < dl ->
       /* BLPOP for min(sleep, time to the deadline) */
       if :: s > dl - now -> s = dl - now :: else -> skip fi;
       blk[i] = 1; pe[i] = now + s; pw[i] = 1; due[i] = dl; rv[i] = L_EMPTY; s = 0;
#ifdef BELIEF_FROM_SEND
       ps = now;
#endif
       deliver(i);
       check() }
  fi;
  /* its reply, or the deadline (the pop is abandoned: it may still take a notice) */
  if
  :: atomic { pw[i] && !blk[i] -> pw[i] = 0; due[i] = now;
       printf("MSC: t=%d c%d pop returns %d (0 timeout, 1 wake-up, 2 notice)\n", now, i, rv[i]) }
  :: atomic { pw[i] && blk[i] && now >= dl -> pw[i] = 0; due[i] = now; rv[i] = L_EMPTY;
       printf("MSC: t=%d c%d pop abandoned at the deadline\n", now, i);
       goto wait }
  :: atomic { CRASH -> nf++; printf("MSC: t=%d c%d CRASHES in its pop\n", now, i);
       cs[i] = DEAD; due[i] = INF; el[i] = 1; pw[i] = 0; blk[i] = 0; goto fin }
  :: atomic { CLOSE -> nf++;                  /* the handle closes, the pop in flight */
#ifdef DEFECT_5
       rep[i] = R_NOT;
#else
       rep[i] = R_UNK;
#endif
       printf("MSC: t=%d c%d's handle CLOSES in its pop: reports %d (2 not acquired, 3 UNKNOWN)\n", now, i, rep[i]);
       cs[i] = CLOSED; el[i] = 1; pw[i] = 0; due[i] = now; check() };
     /* the server drops the blocked pop soon (a push may still come first) */
     atomic { blk[i] = 0; due[i] = INF; check(); goto fin }
  fi;
  /* what it brought */
  if
  :: skip
  :: atomic { CRASH -> nf++; printf("MSC: t=%d c%d CRASHES\n", now, i);
       cs[i] = DEAD; due[i] = INF; el[i] = 1; goto fin }
  :: atomic { LATE -> nf++; printf("MSC: t=%d c%d is LATE\n", now, i);
       late[i] = 1; el[i] = 1; due[i] = INF; lt = now };
     atomic { now > lt -> printf("MSC: t=%d c%d resumes\n", now, i);
       late[i] = 0; due[i] = now; lt = 0 }
  :: atomic { LOST -> nf++; rv[i] = L_EMPTY;  /* its reply lost: attempt (it may hold) */
       printf("MSC: t=%d c%d pop reply LOST\n", now, i) }
  fi;
  atomic {
    if
    :: rv[i] == L_NOTICE ->
       rv[i] = L_EMPTY;
#if KIND == FENCED
       assert(nfe[i] == lf[i] || !RUN(i));
#endif
       acquired(i, PS); PS_CLEAR; check(); goto holding
    :: else -> rv[i] = L_EMPTY; PS_CLEAR; goto wait
    fi
  };

holding:
  /* hold, then release; or crash (the lease runs out), or be late */
  if
  :: atomic { release(i); printf("MSC: t=%d c%d releases\n", now, i);
       cs[i] = DONE; due[i] = INF; check(); goto fin }
  :: atomic { CRASH -> nf++; printf("MSC: t=%d c%d CRASHES holding\n", now, i);
       cs[i] = DEAD; due[i] = INF; goto fin }
  :: atomic { LATE -> nf++; printf("MSC: t=%d c%d is LATE holding\n", now, i);
       late[i] = 1; due[i] = INF; lt = now };
     atomic { now > lt -> late[i] = 0; lt = 0; release(i);
       printf("MSC: t=%d c%d releases (late)\n", now, i);
       cs[i] = DONE; due[i] = INF; check(); goto fin }
  fi;
fin:
  skip
}

init {
  atomic {
    now = 0;
    due[0] = 0; due[1] = SMAX; due[2] = SMAX2;
#if NCL < 3
    due[2] = INF; cs[2] = DONE;
#endif
    run client(0);
    run client(1);
#if NCL >= 3
    run client(2)
#endif
  }
}
