package memstore

import (
	"context"
	"math"
	"time"

	"github.com/google/uuid"

	"github.com/shardq/shardq/internal/store"
	"github.com/shardq/shardq/internal/taskrow"
)

// receiptTTL is store's receiptTTL, in seconds.
const receiptTTL = 600

var lockCK = taskCK(kindLock, 0, taskrow.LockID)

func lockOp(sets []set, ttl int32) op {
	return op{ck: lockCK, key: taskKey(kindLock, 0, taskrow.LockID), sets: sets, ttl: ttl}
}

// lockRow returns key's lock row as it stands, and whether it has live data.
func (s *state) lockRow(key string) (*row, bool) {
	r := s.get(s.c.tasks, key, lockCK)
	return r, r != nil && r.live(s.sec)
}

// holds reports whether lk holds its lock: IF lock_holder = ? AND lock_token = ?.
func (s *state) holds(lk store.LockRef) bool {
	r, _ := s.lockRow(lk.Key)
	return equal(r.value(colLockHolder, s.sec), lk.Holder) && equal(r.value(colLockToken, s.sec), lk.Token)
}

// free reports whether key's lock is free at token expected: IF lock_holder = null AND
// lock_token = ? (nil binds null).
func (s *state) free(key string, expected *int64) bool {
	r, _ := s.lockRow(key)
	var want any
	if expected != nil {
		want = *expected
	}
	return r.value(colLockHolder, s.sec) == nil && equal(r.value(colLockToken, s.sec), want)
}

// lockRowOf is the lock row as a refused conditional write or a read returns it: none
// without live data, else its columns, a null token reading as 0 (MapScan's zero).
func (s *state) lockRowOf(key string) store.LockRow {
	r, live := s.lockRow(key)
	if !live {
		return store.LockRow{}
	}
	token := int64Of(r.value(colLockToken, s.sec))
	return store.LockRow{Holder: uuidOf(r.value(colLockHolder, s.sec)), Token: &token}
}

// releaseOps frees lk and leaves its receipt (store's LockRef.release), with extra
// assignments to the lock row.
func releaseOps(lk store.LockRef, extra []set, adds ...add) ([]op, error) {
	if err := checkUUIDs(lk.Holder); err != nil {
		return nil, err
	}
	release := lockOp(append([]set{{colLockHolder, nil}}, extra...), 0)
	release.adds = adds
	receipt := op{ck: taskCK(kindReceipt, 0, lk.Holder), key: taskKey(kindReceipt, 0, lk.Holder),
		insert: true, ttl: receiptTTL}
	return []op{release, receipt}, nil
}

type locks struct{ *client }

// cas runs one conditional write on key's lock row, returning the row as it stands when
// it does not apply.
func (l locks) cas(ctx context.Context, opName, key string, check func(s *state) bool, build func() ([]op, error)) (bool, store.LockRow, error) {
	applied := false
	var cur store.LockRow
	err := l.exec(ctx, Request{Table: "tasks", Op: opName, Key: key, Write: true, Conditional: true}, func(s *state) error {
		ops, err := build()
		if err != nil {
			return err
		}
		ballot := s.serverStamp()
		if applied = check(s); !applied {
			cur = s.lockRowOf(key)
			return nil
		}
		for _, o := range ops {
			s.apply(s.c.tasks, key, o, ballot)
		}
		return nil
	})
	if err != nil {
		return false, store.LockRow{}, err
	}
	return applied, cur, nil
}

func (l locks) Take(ctx context.Context, key string, holder uuid.UUID, token int64, expected *int64, ttl time.Duration) (bool, store.LockRow, error) {
	return l.cas(ctx, "Locks.Take", key, func(s *state) bool { return s.free(key, expected) }, func() ([]op, error) {
		secs, err := ttlSeconds(int64(ttl / time.Second))
		if err == nil {
			err = checkUUIDs(holder)
		}
		return []op{lockOp([]set{{colLockHolder, holder}}, secs), lockOp([]set{{colLockToken, token}}, 0)}, err
	})
}

func (l locks) Bump(ctx context.Context, key string, token int64, expected *int64) (bool, store.LockRow, error) {
	return l.cas(ctx, "Locks.Bump", key, func(s *state) bool { return s.free(key, expected) }, func() ([]op, error) {
		return []op{lockOp([]set{{colLockToken, token}}, 0)}, nil
	})
}

func (l locks) Renew(ctx context.Context, lk store.LockRef, ttl time.Duration) (bool, store.LockRow, error) {
	return l.cas(ctx, "Locks.Renew", lk.Key, func(s *state) bool { return s.holds(lk) }, func() ([]op, error) {
		secs, err := ttlSeconds(int64(ttl / time.Second))
		if err == nil {
			err = checkUUIDs(lk.Holder)
		}
		return []op{lockOp([]set{{colLockHolder, lk.Holder}}, secs)}, err
	})
}

func (l locks) Release(ctx context.Context, lk store.LockRef) (bool, store.LockRow, error) {
	return l.cas(ctx, "Locks.Release", lk.Key, func(s *state) bool { return s.holds(lk) }, func() ([]op, error) {
		return []op{lockOp([]set{{colLockHolder, nil}}, 0)}, checkUUIDs(lk.Holder)
	})
}

func (l locks) Read(ctx context.Context, key string) (store.LockRow, error) {
	var lr store.LockRow
	q := query{req: Request{Table: "tasks", Op: "Locks.Read", Key: key, Serial: true}, t: l.c.tasks, pk: key,
		slices: []slice{point(lockCK)}, limit: math.MaxInt}
	err := read(ctx, l.client, q, func(s *state, _ *row) store.LockRow { return s.lockRowOf(key) },
		func(r store.LockRow) bool { lr = r; return true })
	if err != nil {
		return store.LockRow{}, err
	}
	return lr, nil
}

func (l locks) Receipt(ctx context.Context, lk store.LockRef) (bool, error) {
	there := false
	q := query{req: Request{Table: "tasks", Op: "Locks.Receipt", Key: lk.Key, Serial: true}, t: l.c.tasks, pk: lk.Key,
		slices: []slice{point(taskCK(kindReceipt, 0, lk.Holder))}, limit: math.MaxInt}
	err := read(ctx, l.client, q, func(*state, *row) bool { return true }, func(bool) bool { there = true; return true })
	return err == nil && there, err
}
