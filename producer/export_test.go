package producer

// SetAfterWrite makes p pass the error each task batch's write returned through f, and go
// on with what f returns, so tests can make an applied write look failed.
func SetAfterWrite(p *Producer, f func(error) error) { p.afterWrite = f }

// SetFailRecord makes p's cancels fail their index write whenever f returns an error.
func SetFailRecord(p *Producer, f func() error) { p.failRecord = f }

// SetAfterRemove makes p's cancels pass what their removal of the task returned through f,
// and go on with what f returns, so tests can make an applied removal look unsettled.
func SetAfterRemove(p *Producer, f func(bool, error) (bool, error)) { p.afterRemove = f }
