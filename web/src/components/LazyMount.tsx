import { useEffect, useRef, useState, type ReactNode } from 'react';

// Mounts its children only once they come near the viewport, so a page of a hundred charts
// draws only the ones on screen (and those scrolled to). The space stays reserved after
// mounting (at least `height`): a chart still waiting for its data would otherwise shrink to
// its header, pull the placeholders below it into view, and every chart of the page would
// mount and ask for its data at once.
export function LazyMount({ height, children }: { height: number; children: ReactNode }) {
  const ref = useRef<HTMLDivElement>(null);
  const [visible, setVisible] = useState(false);
  useEffect(() => {
    const el = ref.current;
    if (!el || visible) return;
    const observer = new IntersectionObserver(
      (entries) => {
        if (entries.some((e) => e.isIntersecting)) setVisible(true);
      },
      { rootMargin: '200px' },
    );
    observer.observe(el);
    return () => observer.disconnect();
  }, [visible]);
  return (
    <div ref={ref} style={{ minHeight: height }}>
      {visible ? children : null}
    </div>
  );
}
