package apiserver

import (
	"context"
	"errors"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// CompactEtcd compacts etcd's history up to its current revision, as the
// API server does every five minutes: a continue token or a watch from an
// earlier resourceVersion then ends in 410 Gone once the API server's
// cache has let it go too. It returns the revision compacted to.
func (s *Server) CompactEtcd(ctx context.Context) (int64, error) {
	if s.etcd == nil {
		return 0, errors.New("compact etcd: not started")
	}
	rev := s.etcd.Server.KV().Rev()
	if _, err := s.etcd.Server.Compact(ctx, &pb.CompactionRequest{Revision: rev, Physical: true}); err != nil {
		return 0, fmt.Errorf("compact etcd to revision %d: %w", rev, err)
	}
	return rev, nil
}
