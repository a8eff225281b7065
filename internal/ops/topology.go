package ops

import "context"

// TopologyCounts is what a topology apply declared on the broker.
type TopologyCounts struct {
	Exchanges int `json:"exchanges"`
	Queues    int `json:"queues"`
	Bindings  int `json:"bindings"`
	Policies  int `json:"policies"`
}

// TopologyApply runs apply, which declares the config's topology on the
// broker and applies its policies, between two audit rows (see audited):
// the platform's change, from the CLI. ops holds no broker client, so the
// declaring is the caller's; what ops adds is who may, and the log.
func (s *Service) TopologyApply(ctx context.Context, apply func(context.Context) (TopologyCounts, error)) (TopologyCounts, error) {
	if err := requirePlatform(ctx, "apply the topology"); err != nil {
		return TopologyCounts{}, err
	}
	return audited(ctx, s, ActionTopologyApply, "", nil, func() (TopologyCounts, error) { return apply(ctx) },
		func(c TopologyCounts) map[string]any {
			return map[string]any{"exchanges": c.Exchanges, "queues": c.Queues, "bindings": c.Bindings, "policies": c.Policies}
		})
}
