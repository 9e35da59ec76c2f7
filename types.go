package shardq

import "github.com/shardq/shardq/shardqtype"

// The types, settings, events and errors every layer shares live in package shardqtype;
// these names are theirs, so code written against either package works with both.

type (
	Driver              = shardqtype.Driver
	Clock               = shardqtype.Clock
	SystemClock         = shardqtype.SystemClock
	ValidationError     = shardqtype.ValidationError
	QueueMismatchError  = shardqtype.QueueMismatchError
	LayoutChangingError = shardqtype.LayoutChangingError
	LayoutConfig        = shardqtype.LayoutConfig
	LayoutChange        = shardqtype.LayoutChange
	LayoutInfo          = shardqtype.LayoutInfo
	Observer            = shardqtype.Observer
	ObserverFunc        = shardqtype.ObserverFunc
	Event               = shardqtype.Event
	BatchAcquired       = shardqtype.BatchAcquired
	LockContended       = shardqtype.LockContended
	Acked               = shardqtype.Acked
	LeaseLost           = shardqtype.LeaseLost
	TaskStarted         = shardqtype.TaskStarted
	TaskFinished        = shardqtype.TaskFinished
	Retried             = shardqtype.Retried
	DeadLettered        = shardqtype.DeadLettered
	NopObserver         = shardqtype.NopObserver
	PartitionFailed     = shardqtype.PartitionFailed
	ClockSkewed         = shardqtype.ClockSkewed
	QueueConfig         = shardqtype.QueueConfig
	TaskState           = shardqtype.TaskState
	TaskInfo            = shardqtype.TaskInfo
	TaskInFlightError   = shardqtype.TaskInFlightError
	SnoozeError         = shardqtype.SnoozeError
	Snoozed             = shardqtype.Snoozed
	CancelError         = shardqtype.CancelError
)

const (
	LayoutLead            = shardqtype.LayoutLead
	MaxLayoutAlign        = shardqtype.MaxLayoutAlign
	MaxLiveLayouts        = shardqtype.MaxLiveLayouts
	DefaultBucketCount    = shardqtype.DefaultBucketCount
	DefaultBucketDuration = shardqtype.DefaultBucketDuration
	DefaultShardCount     = shardqtype.DefaultShardCount
	DefaultTimeout        = shardqtype.DefaultTimeout
	DefaultLockTTL        = shardqtype.DefaultLockTTL
	MinPriority           = shardqtype.MinPriority
	MaxPriority           = shardqtype.MaxPriority
	MaxBucketCount        = shardqtype.MaxBucketCount
	MaxShardCount         = shardqtype.MaxShardCount
	MinBucketDuration     = shardqtype.MinBucketDuration
	MinLockTTL            = shardqtype.MinLockTTL
	MaxCompletedRetention = shardqtype.MaxCompletedRetention
	TaskScheduled         = shardqtype.TaskScheduled
	TaskInFlight          = shardqtype.TaskInFlight
	TaskRetrying          = shardqtype.TaskRetrying
	TaskDead              = shardqtype.TaskDead
	TaskCompleted         = shardqtype.TaskCompleted
	SettingsRefresh       = shardqtype.SettingsRefresh
)

var (
	ErrInvalid         = shardqtype.ErrInvalid
	ErrQueueNotFound   = shardqtype.ErrQueueNotFound
	ErrQueueMismatch   = shardqtype.ErrQueueMismatch
	ErrQueuePaused     = shardqtype.ErrQueuePaused
	ErrClockUnmeasured = shardqtype.ErrClockUnmeasured
	ErrTaskNotFound    = shardqtype.ErrTaskNotFound
	ErrTaskInFlight    = shardqtype.ErrTaskInFlight
	ErrLayoutChanging  = shardqtype.ErrLayoutChanging
)
