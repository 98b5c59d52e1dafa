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

alice := {"id": "alice", "tenant": "acme", "roles": ["member"]}

amy := {"id": "amy", "tenant": "acme", "roles": ["tenant-admin"]}

gary := {"id": "gary", "tenant": "globex", "roles": ["member"]}

ian := {"id": "ian", "tenant": "initech", "roles": ["member", "tenant-admin"]}

root := {"id": "root", "roles": ["admin"]}

allowed := {"allow": true, "reasons": []}
