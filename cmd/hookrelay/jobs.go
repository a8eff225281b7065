package main

import (
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/setup"
	"github.com/spf13/cobra"
)

func (c *cli) jobsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "jobs",
		Short: "List, show and cancel the jobs the admin API and the console started",
		Long: `Long actions started through the admin API or the console (replays, retries,
requeues, purges) run as jobs in a receiver: each has a state (running,
succeeded, failed, cancelled), its progress, and its report once it ended.`,
		Args: setup.NoArgs,
		RunE: showHelp,
	}
	var limit int
	var asJSON bool
	list := &cobra.Command{
		Use:   "list",
		Short: "List the jobs, newest first",
		Args:  setup.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit <= 0 {
				return setup.Usagef(cmd, "--limit: must be positive")
			}
			var jobs []ops.Job
			var total int64
			err := c.operate(cmd, func(_ *config.Config, svc *ops.Service) (err error) {
				jobs, total, err = svc.JobList(cmd.Context(), uuid.Nil, limit)
				return err
			}, func(r *remote) (err error) {
				jobs, total, err = r.jobList(cmd.Context(), limit)
				return err
			})
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(c.out, map[string]any{"total": total, "items": jobs})
			}
			return printJobs(c.out, jobs, total)
		},
	}
	list.Flags().IntVar(&limit, "limit", ops.DefaultListLimit, "show at most this many")
	list.Flags().BoolVar(&asJSON, "json", false, `print JSON: {"total", "items": [{"id", "kind", "actor", "state", "progress", "result", "error", ...}]}`)
	one := func(use, short string, cancel bool) *cobra.Command {
		var asJSON bool
		cmd := &cobra.Command{
			Use:   use + " JOB-ID",
			Short: short,
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				id, err := uuid.Parse(args[0])
				if err != nil {
					return setup.Usagef(cmd, "%q is not a job id", args[0])
				}
				var j *ops.Job
				err = c.operate(cmd, func(_ *config.Config, svc *ops.Service) (err error) {
					if cancel {
						j, err = svc.JobCancel(cmd.Context(), id)
					} else {
						j, err = svc.JobGet(cmd.Context(), id)
					}
					if errors.Is(err, ops.ErrNotFound) || errors.Is(err, ops.ErrConflict) {
						return errors.New(plainMessage(err))
					}
					return err
				}, func(r *remote) (err error) {
					if cancel {
						j, err = r.jobCancel(cmd.Context(), id.String())
					} else {
						j, err = r.job(cmd.Context(), id.String())
					}
					return err
				})
				if err != nil {
					return err
				}
				if asJSON {
					return printJSON(c.out, j)
				}
				return printJobs(c.out, []ops.Job{*j}, 1)
			},
		}
		cmd.Flags().BoolVar(&asJSON, "json", false, "print the job as JSON, its request, progress and report whole")
		return cmd
	}
	cmd.AddCommand(list, one("show", "Show a job: state, progress, report", false),
		one("cancel", "Stop a running job within 2s; it ends cancelled, saying how far it got", true))
	return cmd
}

func printJobs(w io.Writer, jobs []ops.Job, total int64) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tKIND\tACTOR\tSTATE\tCREATED\tFINISHED\tPROGRESS\tERROR")
	for _, j := range jobs {
		finished := "-"
		if j.FinishedAt != nil {
			finished = j.FinishedAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", j.ID, j.Kind, j.Actor, j.State, j.CreatedAt.UTC().Format(time.RFC3339), finished,
			dash(string(j.Progress)), dash(j.Error))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%d of %d job(s)\n", len(jobs), total)
	return err
}
