package deliver

import "context"

// ReadTiers makes one reading of the retry tiers, as a round does first,
// and returns how many tiers were dead-lettering.
func (r *Reconciler) ReadTiers(ctx context.Context) (int, error) {
	st, err := r.readTiers(ctx)
	return len(st.deadLettering), err
}
