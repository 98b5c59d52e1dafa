# Shared fixtures for the Rego unit tests. Loaded only by test runners.
package ignara.fixtures_test

tenants := {
	"acme": {
		"queues": ["acme-main", "acme-batch"],
		"flavors": ["h100", "a100"],
		"backends": ["slurm", "local"],
		"models": ["llama-70b", "llama-8b"],
		"limits": {
			"max_pods_per_workload": 16,
			"max_gpus_per_workload": 32,
			"max_runtime_seconds": 86400,
		},
	},
	"globex": {
		"queues": ["globex-main"],
		"flavors": ["a100"],
		"backends": ["ray"],
		"models": ["llama-70b", "mistral-7b"],
	},
	"initech": {
		"suspended": true,
		"queues": ["initech-main"],
		"flavors": ["a100"],
		"backends": ["local"],
		"models": ["mistral-7b"],
	},
}

models := {
	"llama-70b": {"flavor": "h100"},
	"llama-8b": {"flavor": "a100"},
	"mistral-7b": {"flavor": "a100"},
}

# 2 x 8 GPUs plus 1 coordinator pod without GPUs: 3 pods, 16 GPUs.
workload := {
	"name": "llama-finetune",
	"queue": "acme-main",
	"backend": "slurm",
	"priority": 10,
	"max_runtime_seconds": 3600,
	"pod_sets": [
		{"name": "workers", "count": 2, "requests": {"nvidia.com/gpu": 8, "cpu": "32"}, "flavors": ["h100"]},
		{"name": "coordinator", "count": 1, "requests": {"cpu": "4"}},
	],
}

# Every scope each role allows (tenants/services/access.py): what a key gets by default.
member_scopes := ["inference", "usage:read", "workloads:read", "workloads:write"]

tenant_admin_scopes := array.concat(member_scopes, ["keys:read", "keys:write"])

all_scopes := array.concat(tenant_admin_scopes, ["admin"])

alice := {"id": "alice", "tenant": "acme", "roles": ["member"], "scopes": member_scopes}

amy := {"id": "amy", "tenant": "acme", "roles": ["tenant-admin"], "scopes": tenant_admin_scopes}

gary := {"id": "gary", "tenant": "globex", "roles": ["member"], "scopes": member_scopes}

ian := {"id": "ian", "tenant": "initech", "roles": ["member", "tenant-admin"], "scopes": tenant_admin_scopes}

root := {"id": "root", "roles": ["admin"], "scopes": all_scopes}

# A tenant's principal claiming the platform role (as an OIDC token may).
mallory := {"id": "mallory", "tenant": "acme", "roles": ["admin"], "scopes": all_scopes}

# A key that may only read usage.
reader := {"id": "reader", "tenant": "acme", "roles": ["member"], "scopes": ["usage:read"]}

allowed := {"allow": true, "reasons": []}
