package sim

// Reset returns the phone to the state New gives a phone of its model and
// serial: only the system apps installed, every app's data (notes, browser
// history, settings) cleared, the clock back at ClockStart, the screen on
// at the home screen. Its screenshots are then byte-identical to a new
// phone's. It is one input applied under the lock, like any other.
func (p *Phone) Reset() error {
	fresh, err := New(p.model.Name, p.Serial())
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.st = fresh.st
	p.pngHash, p.pngData = "", nil
	p.changed(p.normalize())
	return nil
}
