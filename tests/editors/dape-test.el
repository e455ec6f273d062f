;;; dape-test.el --- hpcdap driven from Emacs through dape  -*- lexical-binding: t; -*-

;; SPDX-License-Identifier: Apache-2.0

;;; Commentary:

;; A headless session of Emacs's DAP client against `hpcdap dap', with the
;; configuration README.md gives, entered the way a user enters it (M-x dape
;; and a line in the minibuffer).  The job is the bundled ring program with 4
;; ranks through the local launcher: a breakpoint in a source buffer stops
;; every rank, the stack, threads and a value of each rank are what the
;; program says, `next' steps the job, the breakpoint is removed and the job
;; runs to its end with every rank's output in the REPL.
;;
;; Run by `make test-editors':
;;   HPCDAP=bin/hpcdap RING=/tmp/ring RING_SRC=examples/ring/ring.c \
;;   emacs -Q --batch -l ert -l dape -l tests/editors/dape-test.el \
;;         -f ert-run-tests-batch-and-exit

;;; Code:

(require 'ert)
(require 'dape)

(defconst hpcdap-test-binary (getenv "HPCDAP"))
(defconst hpcdap-test-program (getenv "RING"))
(defconst hpcdap-test-source (getenv "RING_SRC"))

;; The configuration of README.md ("Emacs (dape)"), with the program given on
;; the command line as a user gives it.
(add-to-list 'dape-configs
             `(hpcdap
               modes (c-mode c-ts-mode c++-mode c++-ts-mode fortran-mode f90-mode)
               command ,hpcdap-test-binary
               command-args ("dap")
               :type "hpcdap"
               :request "launch"
               :launcher "local"
               :np 4))

;; No windows to lay out in batch mode: the REPL buffer is still made.
(setq dape-start-hook '(dape-repl))
;; Batch mode has nobody to ask whether a buffer's process may be killed.
(setq kill-buffer-query-functions nil)
;; Keep the DAP messages; run-dape.sh shows them when a check fails.
(setq dape-debug t)
(defun hpcdap-test-save-events ()
  "Write the DAP messages to the file DAPE_EVENTS_LOG names, if any."
  (when-let* ((log (getenv "DAPE_EVENTS_LOG")))
    (let ((text (hpcdap-test-events-text)))
      (with-temp-file log (insert text)))))

(defmacro hpcdap-test-wait (what form &optional seconds)
  "Wait up to SECONDS (default 60) for FORM to be non-nil; fail naming WHAT."
  `(let ((deadline (+ (float-time) ,(or seconds 60))))
     (while (and (not ,form) (< (float-time) deadline))
       (accept-process-output nil 0.02))
     (or ,form (ert-fail (list "timed out waiting for" ,what
                               (hpcdap-test-repl-text)
                               (hpcdap-test-events-text))))))

(defun hpcdap-test-repl-text ()
  "The REPL buffer's text, for failure messages and output checks."
  (if-let* ((buffer (get-buffer "*dape-repl*")))
      (with-current-buffer buffer (buffer-substring-no-properties (point-min) (point-max)))
    ""))

(defun hpcdap-test-events-text ()
  "The DAP messages dape logged, for failure messages."
  (if-let* ((buffer (get-buffer "*dape-connection events*")))
      (with-current-buffer buffer (buffer-substring-no-properties (point-min) (point-max)))
    ""))

(defun hpcdap-test-idle-p ()
  "Non-nil when the session has no request in flight."
  (let ((conn (dape--live-connection 'parent t)))
    (or (not conn) (zerop (jsonrpc-continuation-count conn)))))

(defun hpcdap-test-stopped ()
  "Wait until the session is stopped with no request in flight and its frame known."
  (hpcdap-test-wait "a stop"
                    (and (dape--live-connection 'stopped t)
                         (hpcdap-test-idle-p)
                         (dape--current-stack-frame (dape--live-connection 'stopped t)))))

(defun hpcdap-test-request (conn command arguments)
  "Send COMMAND with ARGUMENTS on CONN and return the response body; fail on an error."
  (let (done body error)
    (dape--with-request-bind (b e) (dape-request conn command arguments)
      (setq body b error e done t))
    (hpcdap-test-wait (format "the %s response" command) done 30)
    (when error (ert-fail (list command error)))
    body))

;; The bodies of the stopped events since the last look, newest first.
(defvar hpcdap-test-stops nil)
(advice-add 'dape-handle-event :before
            (lambda (_conn event body)
              (when (eq event 'stopped)
                (push body hpcdap-test-stops))))

(defun hpcdap-test-primary-stop ()
  "The body of the stopped event since the last look that moved the focus, if any."
  (seq-find (lambda (b) (not (eq (plist-get b :preserveFocusHint) t))) hpcdap-test-stops))

(defun hpcdap-test-rank-of (conn thread-id)
  "The rank (a string) of the thread THREAD-ID of CONN, from its name."
  (let* ((thread (seq-find (lambda (th) (eq (plist-get th :id) thread-id)) (dape--threads conn)))
         (name (or (plist-get thread :name) "")))
    (and (string-match "\\`rank \\([0-9]+\\) " name)
         (match-string 1 name))))

(defun hpcdap-test-goto-line (line)
  (goto-char (point-min))
  (forward-line (1- line)))

(defun hpcdap-test-line-of (regexp)
  "The line of the source buffer's first match of REGEXP."
  (save-excursion
    (goto-char (point-min))
    (re-search-forward regexp)
    (line-number-at-pos)))

(ert-deftest hpcdap-dape-four-ranks ()
  "Breakpoint, stack, threads, values, next and run to the end of a 4-rank job."
  (should (file-executable-p hpcdap-test-binary))
  (should (file-executable-p hpcdap-test-program))
  (let* ((source (find-file-noselect hpcdap-test-source))
         (workdir (make-temp-file "hpcdap-dape-" t))
         (bp-line (with-current-buffer source
                    (hpcdap-test-line-of "double pi = ring_sum(local);")))
         adapter)
    (unwind-protect
        (with-current-buffer source
          ;; A breakpoint on a line every rank reaches, set in the buffer.
          (save-excursion
            (hpcdap-test-goto-line bp-line)
            (dape-breakpoint-toggle))
          (should (= 1 (length dape--breakpoints)))
          ;; M-x dape, as a user types it.
          (cl-letf (((symbol-function 'read-from-minibuffer)
                     (lambda (&rest _)
                       (format "hpcdap :program %S :args [%S]"
                               hpcdap-test-program workdir))))
            (call-interactively #'dape))
          ;; The job stops when one rank hits (stopMode "all"), the others where they are;
          ;; a rank that hit at the same time is reported by a stopped event of its own. Each
          ;; continue lets the next ranks reach the breakpoint, until every rank has.
          (setq adapter (jsonrpc--process (dape--live-connection 'parent)))
          (let ((seen nil) conn)
            (while (< (length seen) 4)
              (hpcdap-test-stopped)
              (setq conn (dape--live-connection 'stopped))
              (let* ((primary (hpcdap-test-primary-stop))
                     (tid (plist-get primary :threadId))
                     (stack (hpcdap-test-request conn :stackTrace (list :threadId tid :levels 1)))
                     (frame (aref (plist-get stack :stackFrames) 0))
                     (value (hpcdap-test-request conn :evaluate
                                                 (list :expression "rank"
                                                       :frameId (plist-get frame :id)
                                                       :context "watch"))))
                ;; The stop is at the breakpoint, in main, of the source buffer's file, and
                ;; the rank's own value shows.
                (should (equal (plist-get frame :name) "main"))
                (should (= (plist-get frame :line) bp-line))
                (should (equal (file-truename (plist-get (plist-get frame :source) :path))
                               (file-truename hpcdap-test-source)))
                (should (equal (plist-get value :result) (hpcdap-test-rank-of conn tid)))
                ;; Every rank is a thread named for its rank, and all are stopped.
                (should (= 4 (length (dape--threads conn))))
                (dotimes (k 4)
                  (should (seq-find (lambda (th) (string-prefix-p (format "rank %d " k)
                                                                  (plist-get th :name)))
                                    (dape--threads conn))))
                (hpcdap-test-wait "every thread stopped"
                                  (seq-every-p (lambda (th) (eq (plist-get th :status) 'stopped))
                                               (dape--threads conn)))
                ;; The ranks whose hits came with this stop.
                (dolist (b hpcdap-test-stops)
                  (when (equal (plist-get b :reason) "breakpoint")
                    (push (hpcdap-test-rank-of conn (plist-get b :threadId)) seen)))
                (setq hpcdap-test-stops nil)
                (when (< (length seen) 4)
                  (dape-continue conn)
                  (hpcdap-test-wait "the next stop" (hpcdap-test-primary-stop)))))
            ;; Each rank's hit was reported once, and dape counted four hits.
            (should (equal (sort seen #'string<) '("0" "1" "2" "3")))
            (should (= 4 (dape--breakpoint-hits (car dape--breakpoints))))
            ;; `next' steps the last rank over the ring (the others run to let it) to the
            ;; line after the breakpoint.
            (dape-next conn)
            (hpcdap-test-wait "the step's stop" (hpcdap-test-primary-stop))
            (hpcdap-test-stopped)
            (let ((frame (dape--current-stack-frame (dape--live-connection 'stopped))))
              (should (equal (plist-get frame :name) "main"))
              (should (= (plist-get frame :line) (1+ bp-line)))))
          ;; Remove the breakpoint in the buffer and run to the end.
          (save-excursion
            (hpcdap-test-goto-line bp-line)
            (dape-breakpoint-toggle))
          (should (null dape--breakpoints))
          (hpcdap-test-wait "the breakpoint's removal" (hpcdap-test-idle-p) 30)
          (dape-continue (dape--live-connection 'stopped))
          (hpcdap-test-wait "the end of the session"
                            (not (dape--live-connection 'parent t)))
          (let ((text (hpcdap-test-repl-text)))
            (dotimes (r 4)
              (should (string-match-p (format "rank %d of 4: my slice [0-9.]+, pi = 3\\.14159" r)
                                      text))))
          ;; The adapter and the ranks are gone.
          (hpcdap-test-wait "the adapter's exit" (not (process-live-p adapter)) 30)
          (hpcdap-test-wait "no rank left"
                            (/= 0 (call-process "pgrep" nil nil nil "-f" hpcdap-test-program))
                            30))
      (hpcdap-test-save-events)
      (ignore-errors (dape-quit))
      (delete-directory workdir t))))

;;; dape-test.el ends here
